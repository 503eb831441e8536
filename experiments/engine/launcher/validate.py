"""Checks that need values, run on the composed config before any process starts.

Each failure raises `ConfigError` with one line that names the key and the fix; run.py prints it
and exits with code 2.
"""
from __future__ import annotations

import functools
import inspect
import os

from omegaconf import DictConfig, OmegaConf

from experiments.engine.rank.build import RUNTIME_ARGUMENTS, knobs, target_of
from experiments.engine.rank.checkpoint import check_config as check_checkpoint_config
from experiments.engine.core.collectives import check_reduction
from experiments.runformat.errors import ConfigError, require
from experiments.runformat.knob_types import accepted_parameters, check_finite, check_knobs
from experiments.engine.launcher.launcher_checks import check_launcher
from experiments.runformat.runtime import WANDB_MODES, processes_of, wandb_mode, wandb_mode_origin
from sparsifiers.common.kernels import check_backend
from sparsifiers.common.layout import Layout

GROUPS = ("sparsifier", "model", "dataset", "optimizer", "schedule")


def validate(cfg: DictConfig) -> None:
    """Raises ConfigError for the first bad value found."""
    _check_every_number_is_finite(cfg)
    _check_sizes(cfg)
    check_checkpoint_config(cfg)
    check_launcher(cfg)
    _check_choices(cfg)
    for group in GROUPS:
        check_group_knobs(group, cfg[group])
    _check_dataset_available(cfg)
    _check_model_fits_dataset(cfg)
    _check_optimizer_fits_sparsifier(cfg)
    _check_optimizer_builds(cfg)
    _check_schedule(cfg)
    _check_sparsifier_builds(cfg)
    _check_network(cfg)
    # What the knobs ask of this machine and data, once every knob is known to be good:
    _check_resources(cfg)
    _check_every_worker_has_a_batch(cfg)
    _check_wandb(cfg)  # last: the only check that may wait (a few seconds) on the network


def _check_every_number_is_finite(cfg: DictConfig) -> None:
    """NaN and infinity pass every range check written as a comparison the wrong way round
    (`not inf >= 0` is False, `nan > 0` is False), so they are refused first, everywhere: group
    knobs, network numbers, schedule values, top-level keys."""

    def walk(node, prefix: str) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            path = f"{prefix}.{key}" if isinstance(node, dict) else f"{prefix}[{key}]"
            if isinstance(value, (dict, list)):
                walk(value, path)
            else:
                check_finite(path, value)

    for key in cfg:
        if key == "hydra":  # Hydra's own node resolves only inside a job, and holds no knob
            continue
        value = cfg[key]
        if OmegaConf.is_config(value):
            walk(OmegaConf.to_container(value, resolve=True), key)
        else:
            check_finite(key, value)


def _check_sizes(cfg: DictConfig) -> None:
    require(cfg.workers >= 1, f"workers must be >= 1, got {cfg.workers}: set e.g. workers=4")
    require(cfg.batch_size >= 1, f"batch_size must be >= 1, got {cfg.batch_size}: set e.g. batch_size=32")
    require(cfg.epochs >= 1, f"epochs must be >= 1, got {cfg.epochs}: set e.g. epochs=1")
    require(
        cfg.max_steps is None or cfg.max_steps >= 1,
        f"max_steps must be >= 1 or null, got {cfg.max_steps}: set e.g. max_steps=20",
    )
    processes = processes_of(cfg.processes, cfg.workers)
    require(processes >= 1, f"processes must be >= 1 or null, got {cfg.processes}")
    require(
        cfg.workers % processes == 0,
        f"workers={cfg.workers} is not a multiple of processes={processes}: set processes to a divisor of workers",
    )
    require(cfg.launcher.nnodes >= 1, f"launcher.nnodes must be >= 1, got {cfg.launcher.nnodes}")
    require(
        processes % cfg.launcher.nnodes == 0,
        f"processes={processes} is not a multiple of launcher.nnodes={cfg.launcher.nnodes}",
    )
    require(cfg.logger.log_every >= 1, f"logger.log_every must be >= 1, got {cfg.logger.log_every}")
    require(
        cfg.eval_limit is None or cfg.eval_limit >= 1,
        f"eval_limit must be >= 1 or null (all), got {cfg.eval_limit}: set e.g. eval_limit=256",
    )
    require(
        cfg.eval_every_steps >= 0,
        f"eval_every_steps must be >= 0 (0: at epoch ends only), got {cfg.eval_every_steps}: set e.g. eval_every_steps=50",
    )
    require(cfg.eval_near >= 0, f"eval_near must be >= 0 (a distance to eval_target), got {cfg.eval_near}: set e.g. eval_near=0.05")
    require(
        cfg.eval_near_every >= 1,
        f"eval_near_every must be >= 1 (steps between evaluations near eval_target), got {cfg.eval_near_every}: "
        "set e.g. eval_near_every=5",
    )
    require(
        not cfg.stop_at_target or cfg.eval_target is not None,
        "stop_at_target=true needs eval_target (the headline metric value to stop at): set e.g. eval_target=0.8",
    )
    require(
        cfg.position_bins >= 0,
        f"position_bins must be >= 0 (0: no histograms), got {cfg.position_bins}: set e.g. position_bins=4096",
    )
    require(cfg.warmup_steps >= 0, f"warmup_steps must be >= 0, got {cfg.warmup_steps}")
    require(cfg.checksum_every >= 0, f"checksum_every must be >= 0 (0 disables), got {cfg.checksum_every}")
    require(cfg.launcher.timeout_s > 0, f"launcher.timeout_s must be > 0, got {cfg.launcher.timeout_s}")
    require(cfg.seed >= 0, f"seed must be >= 0, got {cfg.seed}: set e.g. seed=0")


def _check_choices(cfg: DictConfig) -> None:
    require(cfg.device in ("auto", "cpu", "cuda"), f"device must be auto, cpu or cuda, got {cfg.device}")
    require(
        cfg.launcher.backend in ("auto", "gloo", "nccl"),
        f"launcher.backend must be auto, gloo or nccl, got {cfg.launcher.backend}",
    )
    require(
        cfg.logger.wandb_mode in WANDB_MODES,
        f"logger.wandb_mode must be offline, online or disabled, got {cfg.logger.wandb_mode}",
    )
    require(  # it overrides logger.wandb_mode: a typo there would reach wandb inside a rank
        os.environ.get("WANDB_MODE") in (None, "", *WANDB_MODES),
        f"the environment variable WANDB_MODE={os.environ.get('WANDB_MODE')} must be offline, online or disabled "
        "(it wins over logger.wandb_mode): set one of those, or unset it",
    )
    check_backend(cfg.kernels)  # the DDP hook's check too: one message
    check_reduction(cfg.reduction)
    require(
        cfg.on_nonfinite in ("fail", "skip"),
        f"on_nonfinite must be fail or skip, got {cfg.on_nonfinite}: fail is the default",
    )
    require(
        cfg.max_skipped_steps >= 1,
        f"max_skipped_steps must be >= 1 (more skipped steps in a row than this fail the run), got {cfg.max_skipped_steps}",
    )
    if cfg.device == "cuda":
        import torch

        require(torch.cuda.is_available(), "device=cuda but no GPU is visible: set device=cpu (or auto)")


def check_group_knobs(group: str, node: DictConfig) -> None:
    """Every knob of a group node must be a parameter of its target, of its type and range.
    Public: the DDP hook (experiments/engine/ddp) checks a sparsifier node with it too."""
    try:
        target = target_of(node)
    except Exception as error:
        raise ConfigError(f"{group}._target_={node._target_} cannot be imported ({error})") from None
    # Names from the signature, types too, ranges from knob_types.RANGES: the DDP hook's check.
    check_knobs(group, node.get("name", "?"), target, knobs(node), RUNTIME_ARGUMENTS[group])


def _check_dataset_available(cfg: DictConfig) -> None:
    """A dataset module may define `check_available(**knobs)`, which raises DatasetNotFound
    (with how to get the data) when its files are missing: called here, before launch."""
    from datasets.base import DatasetCorrupt, DatasetNotFound

    check = getattr(inspect.getmodule(target_of(cfg.dataset)), "check_available", None)
    if check is None:
        return
    try:
        check(**knobs(cfg.dataset))
    except (DatasetNotFound, DatasetCorrupt) as error:
        raise ConfigError(f"dataset={cfg.dataset.get('name', '?')}: {error}") from None


@functools.lru_cache(maxsize=2)
def _dataset_for(dataset_yaml: str):
    """The dataset, loaded once per dataset config in this process (validation needs its shapes)."""
    from datasets.base import DatasetCorrupt, DatasetNotFound
    from experiments.engine.rank.build import build_dataset

    try:
        return build_dataset(OmegaConf.create({"dataset": OmegaConf.create(dataset_yaml)}))
    except (DatasetCorrupt, DatasetNotFound) as error:
        raise ConfigError(f"dataset: {error}") from None


def _check_model_fits_dataset(cfg: DictConfig) -> None:
    """The model must take what the dataset's task provides (an LSTM needs a vocabulary, NCF
    users and items, an image classifier shapes and classes)."""
    data = _dataset_for(OmegaConf.to_yaml(cfg.dataset, resolve=True))
    accepted = accepted_parameters(target_of(cfg.model))
    if accepted is None:
        return
    missing = [name for name in data.model_inputs() if name not in accepted]
    require(
        not missing,
        f"model={cfg.model.get('name', '?')} does not fit dataset={cfg.dataset.get('name', '?')} "
        f"(a {data.kind} task, which provides {', '.join(data.model_inputs())}): choose a {data.kind} model",
    )


def _check_resources(cfg: DictConfig) -> None:
    """Memory (model, optimizer, residual per hosted rank, scratch, dataset per process) and
    processes per core, estimated on the real model before launch (resources.py)."""
    from experiments.engine.launcher.resources import check_resources

    dataset_yaml = OmegaConf.to_yaml(cfg.dataset, resolve=True)
    layout = _layout_for(OmegaConf.to_yaml(cfg.model, resolve=True), dataset_yaml)
    owns_momentum = bool(getattr(target_of(cfg.sparsifier), "owns_momentum", False))
    check_resources(cfg, layout.numel, _dataset_for(dataset_yaml), target_of(cfg.optimizer), owns_momentum)


def _check_every_worker_has_a_batch(cfg: DictConfig) -> None:
    from experiments.engine.launcher.resources import check_every_worker_has_a_batch

    check_every_worker_has_a_batch(cfg, _dataset_for(OmegaConf.to_yaml(cfg.dataset, resolve=True)))


def _check_optimizer_fits_sparsifier(cfg: DictConfig) -> None:
    from experiments.engine.rank.optimizers import ReleasedSGD

    owns_momentum = getattr(target_of(cfg.sparsifier), "owns_momentum", False)
    require(
        not (owns_momentum and target_of(cfg.optimizer) is ReleasedSGD),
        f"sparsifier={cfg.sparsifier.get('name', '?')} applies momentum itself, and optimizer=released_sgd "
        "always adds its momentum buffer to the step: use optimizer=sgd",
    )


def _check_optimizer_builds(cfg: DictConfig) -> None:
    """Builds the optimizer over one dummy parameter, so that its own checks (lr >= 0, ...) fail
    here rather than in every rank."""
    import torch

    from experiments.engine.core.eager import dynamo_left_unimported
    from experiments.engine.rank.build import instantiate_node

    try:
        with dynamo_left_unimported(torch.optim.Optimizer):
            instantiate_node(cfg.optimizer, [torch.nn.Parameter(torch.zeros(1))])
    except (TypeError, ValueError) as error:
        raise ConfigError(f"optimizer={cfg.optimizer.get('name', '?')}: {error}") from None


def _check_schedule(cfg: DictConfig) -> None:
    from experiments.engine.rank.build import instantiate_node

    try:
        instantiate_node(cfg.schedule)
    except (TypeError, ValueError) as error:
        raise ConfigError(str(error)) from None


@functools.lru_cache(maxsize=4)
def _layout_for(model_yaml: str, dataset_yaml: str) -> Layout:
    """The model's gradient layout, built once per (model, dataset) in this process."""
    from experiments.engine.rank.build import build_model

    node = OmegaConf.create({"model": OmegaConf.create(model_yaml)})
    return Layout.from_module(build_model(node, _dataset_for(dataset_yaml)))


def _check_sparsifier_builds(cfg: DictConfig) -> None:
    """Builds the first and last rank's sparsifier on the real model, so that knob values the
    method itself checks (exchange kinds, rule names, k >= 1) fail here, not in every rank."""
    from experiments.engine.rank.build import build_sparsifier

    model_yaml = OmegaConf.to_yaml(cfg.model, resolve=True)
    dataset_yaml = OmegaConf.to_yaml(cfg.dataset, resolve=True)
    layout = _layout_for(model_yaml, dataset_yaml)
    for rank in sorted({0, cfg.workers - 1}):
        try:
            build_sparsifier(cfg, layout, rank)
        except ConfigError:
            raise
        except (TypeError, ValueError) as error:
            raise ConfigError(f"sparsifier={cfg.sparsifier.get('name', '?')}: {error}") from None


def _check_network(cfg: DictConfig) -> None:
    from experiments.engine.core.network import NetworkModel

    NetworkModel.from_config(cfg.network)  # raises ConfigError


def _check_wandb(cfg: DictConfig) -> None:
    if wandb_mode(cfg.logger.wandb_mode) == "online":
        has_key = bool(os.environ.get("WANDB_API_KEY")) or os.path.exists(os.path.expanduser("~/.netrc"))
        require(
            has_key,
            f"{wandb_mode_origin(cfg.logger.wandb_mode)} needs a W&B key: set WANDB_API_KEY (or run `wandb login`), "
            "or use logger=wandb_offline (or WANDB_MODE=offline)",
        )
        from experiments.engine.launcher.environment_checks import check_wandb_reachable

        check_wandb_reachable(wandb_mode_origin(cfg.logger.wandb_mode))  # a few seconds now, instead of ~100 s blocked after launch
