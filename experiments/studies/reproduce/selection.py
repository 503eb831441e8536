"""The selection-cost study of `make reproduce`: per-worker selection time against W at ResNet-18
size, on real gradients, in the settled regime, on both kernel paths, written as ordinary run
directories that `python -m analysis.claims` judges (`selection.*`, docs/claims.md).

    python -m experiments.studies.reproduce.selection --out DIR [--quick]

Why a replay. The claim needs `time/select_ms_max` after MiCRO's and ExDyna's threshold has
settled, at W = 2 .. 16, at the papers' density 0.001 on ResNet-18 (N ~ 11.2 M). Training that
with 16 hosted ranks for the hundreds of steps the threshold needs (it moves at most 0.5% a
step) is far out of reach of a 2-core machine: one forward/backward of ResNet-18 on a batch
of 32 takes 1-3 s there. Selection does not read the parameters, only each rank's accumulator,
so the study computes a pool of real gradients once and replays them through the real step.

The gradients. `pool_size` (G, default max W) flat gradients of the project's own model
(conf/model/<model>.yaml built by experiments/engine/rank/build.py: ResNet-18 with the CIFAR stem, whose
first conv takes the dataset's 1 channel, so N = 11,172,810 on Fashion-MNIST, 1,152 fewer than
CIFAR's 11,173,962) on the real dataset (conf/dataset/fashion_mnist.yaml): the gradients of the
batch loss of the first G steps of single-worker SGD from the seed's initialisation (the
config's optimizer, lr 0.05, momentum 0.9, weight decay 5e-4; the config's batch size, 32;
rank 0's shard of one worker, the task's own batches and augmentation), each at that step's
parameters, in the flat layout the sparsifiers index (experiments/engine/core/flat_grad.py).

The replay. One (method, W) is W hosted ranks in one process (experiments/engine/core/world.py, no
torch.distributed call), driven as the training loop drives them (experiments/engine/core/hosted.py,
`HostedRanks`): each with the real sparsifier (experiments/engine/rank/build.py), its own residual and
the real step: at step t rank r's gradient is pool[(t + r) mod G] (distinct across the ranks of
a step while W <= G, every rank cycling through every gradient), added to its residual by the
step's accumulate rule (experiments/engine/core/error_feedback.py), then `sparsify_and_exchange`
(experiments/engine/core/step.py: averaged inputs, the leader's plan, the timed select, the exchange,
error feedback, observe). Not done: forward/backward and the optimizer
step (parameters stay as the pool left them; selection never reads them), so rows log no loss
and no compute time (null), and `time/step_ms` is accumulate plus phases 2-5 only.

Settle, then time. Each (method, W) runs `settle_steps` steps first (the method's default in
SETTLE_STEPS; the same for every W of a method, so that its runs share one context), on the
compiled path (`kernels=auto`: the paths select identically, sparsifiers/common/kernels/backend.py, so
the trajectory is the one the reference path would give, faster). MiCRO and ExDyna start from
`sparsifier.threshold_start=calibrated` (recorded in config.yaml): lambda_0 is the first step's
mean k-th largest |acc|, and the rule then climbs at most 0.5% a step to where error feedback's
build-up puts lambda, several times higher on these gradients (0.016 -> about 0.1 at W = 16:
ln 6 / ln 1.005 = 360 steps at the least). Measured after the 400 settle steps, the mean density
error of the timed steps: +0.13 at W = 16 (median +0.09), +0.2 to +0.4 at W = 2-8 (medians
+0.16 to +0.38), with spikes to +1.4-1.9 once per pool cycle: W = 16 is at the edge of the
controller's band (+-0.1), W <= 8 are still climbing (rho > 1.1 raises lambda 0.5% a step) and
would need a few hundred steps more than the budget allows. A selection's cost is a scan of the
N / W elements, which a few tenths more selected indices barely change. Then 2 x `timed_steps`
steps continue the same trajectory, alternating the two paths step by step: step S + 2j on
`kernels=torch` (the reference path, the kind of implementation the papers timed), S + 2j + 1 on
`kernels=auto`, so both paths meet the same machine load over the same stretch of the trajectory.

What is written. Per (method, W) two run directories, `<out>/<method>_w<W>_<kernels>/`, each an
ordinary finished run: config.yaml (composed by Hydra, experiments/engine/launcher/compose.py, with
`kernels`, `warmup_steps` = S, `max_steps` = S + 2T, `tag`, `device` (cuda when a GPU is here,
else cpu; `--device cpu` forces the CPU, study_device), `processes=1`, the
method's knobs), env.json and status.json (experiments/engine/launcher/launch.prepare_run_dir, then
`done`), metrics.jsonl (the rank process's JSONL sink) and summary.json (experiments/engine/rank/summary.py's
accumulator plus the fields the training loop records, and `replay`: what this study did). Both
directories hold the settle rows (step < S: counts-based metrics and the method's state, no
timings, as they were not timed on either path) and then their own path's timed rows (every
metric of a logged training row: time/*, traffic/*, density/*, buildup, selection/*, ef/*, the
method's state). `time/select_ms_max` is the slowest hosted rank's select (the leader's plan
included), as in a training run; the analysis takes its median over the rows at or after
warmup_steps, i.e. over the timed rows of that path only.

Costs (measured on 2 shared cores, load average 4): the pool 30 s (16 ResNet-18 forward/backward
passes on one thread); MiCRO's and ExDyna's settle about 200 s together (accumulate reads and
writes N floats per rank and step, 400 steps at W = 2 + 4 + 8 + 16 ranks); Top-k's timed steps
on the torch path (an exact top-k over N per rank and step, 0.2 s each) 35 s. The whole study:
5.5 min of wall time there, 3.6-4.2 min of CPU time (one thread: about its wall time on an idle
machine). SETTLE_STEPS is the knob: 300 steps would save about 50 s and leave W = 16 at +0.6.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from experiments.runformat import metric_keys as keys
from experiments.engine.core.hosted import HostedRanks
from experiments.engine.core.network import NetworkModel
from experiments.engine.core.sparsify import SparsifyOutcome
from experiments.engine.core.tasks import describe_task, make_task
from experiments.engine.core.world import World, init_world
from experiments.engine.core.flat_grad import bind_flat_grad
from experiments.engine.launcher.compose import compose_job
from experiments.engine.launcher.launch import prepare_run_dir
from experiments.engine.rank.build import (build_dataset, build_model, build_optimizer, build_sparsifier, optimizer_node,
                                           target_of)
from experiments.engine.rank.sinks import JsonlSink
from experiments.engine.rank.summary import SummaryAccumulator
from experiments.runformat.run_dir import SUMMARY
from experiments.runformat.runtime import resolve
from sparsifiers.common.base import Sparsifier
from sparsifiers.common.kernels import set_backend as set_kernel_backend
from sparsifiers.common.kernels import warm_up as warm_up_kernels
from sparsifiers.common.layout import Layout
from sparsifiers.registry import chosen, names

# The study's choice: the partition methods and the Top-k baselines their papers compare them with.
METHODS = chosen("topk", "cltk", "deft", "micro", "exdyna")
WORKERS = (2, 4, 8, 16)
DENSITY = 0.001  # the papers'
MODEL, DATASET = "resnet18", "fashion_mnist"
TAG = "laptop/selection_replay"  # a replay, not training: only the selection-cost claims judge it (Claim.studies)
# One core per rank, as the step benchmark times it (experiments/studies/benchmarks/step.py). Also a
# necessity on a shared machine: with 2 intra-op threads on 2 busy cores, torch's OpenMP
# barriers stalled ~50 ms per call (a 270k-element top-k: 48 ms with 2 threads, 5 ms with 1).
THREADS = 1
# The reference path first: the papers timed plain framework ops.
KERNEL_PATHS = ("torch", "auto")
SETTLE_KERNELS = "auto"  # the paths select identically: the settle runs on the faster one
THRESHOLD_METHODS = names(thresholded=True)  # their density error must have settled
# Knobs the study sets per method (recorded in config.yaml, so the method label shows them):
# - MiCRO, ExDyna: the calibrated start is a factor 3-4 nearer the settled lambda than the
#   released 1 / (2 sqrt(k)) here: about 250 fewer settle steps at 0.5% a step.
# - CLT-k: only the leader runs its top-k. select_ms_max is the slowest rank's, the leader's
#   plan (one top-k over N) either way; `select_on=all` (the released code's wasted top-k on
#   every other rank) would cost W - 1 more top-ks per hosted step and change no timed number.
METHOD_OVERRIDES: dict[str, tuple[str, ...]] = {
    "micro": ("sparsifier.threshold_start=calibrated",),
    "exdyna": ("sparsifier.threshold_start=calibrated",),
    "cltk": ("sparsifier.select_on=leader",),
}
# Steps before the timed ones, per method (the same at every W: one context per method). MiCRO
# and ExDyna need their threshold settled (module docstring); the others have no controller and
# only need the residuals to hold more than one gradient.
SETTLE_STEPS: dict[str, int] = {"micro": 400, "exdyna": 400}
DEFAULT_SETTLE = 10
# Timed steps per path. Top-k's torch path runs one exact top-k over N per rank and step (about
# 0.2 s each here: 6 s a step over W = 2..16); MiCRO's and ExDyna's steps are cheap, and their
# sub-millisecond selections need more of them: on a shared machine a preempted rank adds ~4 ms
# to the slowest rank's time of a step, more often the more ranks a step has. DGC's and
# Gaussian-k's selects (make compare's battery) take 95-200 ms a rank here on either path, 25-50
# times that noise, and their hosted steps up to 9.4 s and 3.1 s at W = 16 on the torch path:
# ten timed steps a path were 155 s and 55 s more of the battery's hour than four. CLT-k and DEFT,
# the papers' own, 10. Any other method (make compare's battery, a user's): 6, a median that two
# preempted steps of the six do not move; ten were about 2 minutes more of the battery's hour
# over the nine methods it gives to, most of it on the torch path of the slow selects (gTop-k's,
# Accordion's, the hard threshold's: 50-240 ms a rank, 1.7-3.3 s a hosted step at W = 16).
TIMED_STEPS: dict[str, int] = {"topk": 4, "dgc": 4, "gaussiank": 4, "cltk": 10, "deft": 10, "micro": 20, "exdyna": 20}
DEFAULT_TIMED = 6
# The controller's band: MiCRO's rule moves lambda least for rho = |U| / k in (1/1.1, 1.1]. A
# threshold method whose timed steps' mean density error lies outside it is flagged.
BAND = 0.1
# run_selection_study's arguments for `make reproduce` (FULL) and for the test suite (QUICK: not
# settled, an MLP's threshold needs many hundred steps on a 4-gradient pool; about 15 s).
FULL: dict[str, Any] = {"workers": WORKERS, "model": MODEL}
QUICK: dict[str, Any] = {"model": "mlp", "workers": (2, 4), "settle_steps": {"micro": 20, "exdyna": 20, "default": 3},
                         "timed_steps": 3, "pool_size": 4}

Progress = Callable[[str], None]


def say_now(line: str) -> None:
    """The default progress: a line, flushed (a long study piped to a log shows as it goes)."""
    print(line, flush=True)


# -- configs ------------------------------------------------------------------------------------
def study_device(requested: str = "auto", cuda_available: bool | None = None) -> str:
    """Where the replay runs: `auto` is the GPU when there is one (the `selection.*` claims are
    then judged on it, as the papers timed their selection on GPUs), else the CPU; `cpu` forces
    the CPU. Written into every run's config (`device=`), so env.json and the analysis name it."""
    available = torch.cuda.is_available() if cuda_available is None else cuda_available
    if requested not in ("auto", "cpu", "cuda"):
        raise ValueError(f"the selection study's device must be auto, cpu or cuda, got {requested}")
    if requested == "cuda" and not available:
        raise ValueError("the selection study's device=cuda: no GPU here; use auto or cpu")
    return "cuda" if requested == "cuda" or (requested == "auto" and available) else "cpu"


def run_overrides(method: str, workers: int, kernels: str, settle: int, timed: int, model: str, dataset: str,
                  density: float, epochs: int | None = None, extra: Sequence[str] = (), device: str = "cpu") -> list[str]:
    """The command-line overrides of one run of the study (what `python run.py` would be given);
    `extra` last, so a caller's overrides win."""
    overrides = [f"model={model}", f"dataset={dataset}", f"sparsifier={method}", f"sparsifier.density={density}",
                 f"workers={workers}", "processes=1", f"device={device}", f"launcher.threads_per_process={THREADS}",
                 f"kernels={kernels}", f"tag={TAG}",
                 f"warmup_steps={settle}", f"max_steps={settle + 2 * timed}", "logger=local", "logger.log_every=1",
                 "logger.progress=false", *METHOD_OVERRIDES.get(method, ())]
    if epochs is not None:
        overrides.append(f"epochs={epochs}")
    return overrides + list(extra)


def compose_run(overrides: list[str]) -> DictConfig:
    """The full composed config (Hydra, as run.py composes it), without Hydra's own node."""
    cfg = compose_job(overrides)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


def with_kernels(cfg: DictConfig, kernels: str) -> DictConfig:
    """`cfg` with `kernels` changed: what composing with `kernels=<kernels>` gives (a top-level
    key no other key interpolates), without composing again (a compose costs 0.3-1 s here)."""
    changed = OmegaConf.merge(cfg, {"kernels": kernels})
    assert isinstance(changed, DictConfig)
    return changed


def per_method(value: int | Mapping[str, int] | None, method: str, defaults: Mapping[str, int], default: int) -> int:
    """A per-method setting: one int for every method, a mapping (key "default" for the rest),
    or None for the study's defaults."""
    if value is None:
        return defaults.get(method, default)
    if isinstance(value, Mapping):
        return int(value.get(method, value.get("default", defaults.get(method, default))))
    return int(value)


# -- the gradients --------------------------------------------------------------------------------
@dataclass
class GradientPool:
    """G real flat gradients (module docstring) and what they came from."""

    gradients: torch.Tensor  # [G, N] float32
    layout: Layout
    data: dict[str, Any]  # the dataset's describe()
    task: dict[str, Any]  # describe_task
    steps_per_epoch: Callable[[int], int]  # W -> the task's steps per epoch at W workers
    losses: list[float]
    seconds: float

    @property
    def size(self) -> int:
        return self.gradients.shape[0]

    @property
    def numel(self) -> int:
        return self.layout.numel

    def gradient(self, rank: int, step: int) -> torch.Tensor:
        """Rank r's gradient at step t: pool[(t + r) mod G]."""
        return self.gradients[(step + rank) % self.size]

    def describe(self, cfg: DictConfig) -> dict[str, Any]:
        return {"gradients": self.size, "rule": "rank r at step t accumulates pool[(t + r) mod G]",
                "source": f"the batch-loss gradients of the first {self.size} steps of single-worker SGD "
                          f"({cfg.optimizer.name}, lr {cfg.optimizer.lr}) on rank 0's shard of {cfg.dataset.name}, "
                          f"batch {cfg.batch_size}, from seed {cfg.seed}'s {cfg.model.name}",
                "losses": self.losses, "seconds": self.seconds}


def gradient_pool(cfg: DictConfig, size: int) -> GradientPool:
    """Builds the model and data of `cfg` as a rank process does and keeps the gradients of
    `size` real SGD steps on one worker (cfg's optimizer, batch size and seed)."""
    started = time.perf_counter()
    torch.manual_seed(cfg.seed)
    data = build_dataset(cfg)
    task = make_task(data)
    model = build_model(cfg, data)
    flat, layout = bind_flat_grad(model)
    optimizer = build_optimizer(cfg, model, build_sparsifier(cfg, layout, 0))
    device = torch.device("cpu")
    shard = task.shard(0, 1, cfg.batch_size, cfg.seed, device)
    gradients = torch.empty(size, layout.numel, dtype=flat.dtype)
    losses: list[float] = []
    state: dict[str, Any] = {}
    model.train()
    batches = iter(())
    epoch = 0
    for index in range(size):
        batch = next(batches, None)
        if batch is None:  # a small dataset: the next epoch's batches
            batches = iter(shard.epoch(epoch))
            epoch += 1
            batch = next(batches)
        flat.zero_()
        loss = task.loss(model, batch, state)
        loss.backward()
        gradients[index].copy_(flat)
        losses.append(float(loss.detach()))
        optimizer.step()
    del model, optimizer, flat

    def steps_per_epoch(workers: int) -> int:
        return task.shard(0, workers, cfg.batch_size, cfg.seed, device).steps_per_epoch

    return GradientPool(gradients, layout, data.describe(), describe_task(task), steps_per_epoch, losses,
                        time.perf_counter() - started)


# One pool per conditions, for the studies that replay many methods in one process (make compare's
# battery replays each method in a study of its own): a ResNet-18 pool is 13-15 s of
# forward/backward and 700 MB, and the methods almost all share one. The key is everything
# gradient_pool's result depends on: the model, data, optimizer as built (a method that owns
# momentum gets one without it: build_optimizer), batch, seed, size and torch's threads (a
# reduction's order, so its float rounding, follows the threads). The global RNG state a build
# leaves is kept too and restored on reuse, so what follows a reused pool draws what it would
# after a fresh one (test_selection_study proves a reused pool's runs equal a fresh pool's).
POOLS_KEPT = 2  # the battery's common pool and one other (DGC's, without momentum)
_pools: dict[str, tuple[GradientPool, torch.Tensor]] = {}


def pool_key(cfg: DictConfig, size: int) -> str:
    owns_momentum = bool(getattr(target_of(cfg.sparsifier), "owns_momentum", False))
    optimizer = OmegaConf.to_container(optimizer_node(cfg, owns_momentum), resolve=True)
    return json.dumps({"model": OmegaConf.to_container(cfg.model, resolve=True),
                       "dataset": OmegaConf.to_container(cfg.dataset, resolve=True), "optimizer": optimizer,
                       "batch_size": cfg.batch_size, "seed": cfg.seed, "size": size,
                       "threads": torch.get_num_threads()}, sort_keys=True, default=str)


def shared_gradient_pool(cfg: DictConfig, size: int) -> tuple[GradientPool, bool]:
    """gradient_pool(cfg, size), built once per key (above) in this process; and whether it was reused."""
    key = pool_key(cfg, size)
    if key in _pools:
        pool, rng_after = _pools[key]
        torch.set_rng_state(rng_after)
        return pool, True
    pool = gradient_pool(cfg, size)
    while len(_pools) >= POOLS_KEPT:
        _pools.pop(next(iter(_pools)))
    _pools[key] = (pool, torch.get_rng_state())
    return pool, False


# -- the replay -----------------------------------------------------------------------------------
@dataclass
class StepRecord:
    """One replayed step: its metrics (counts-based always; per-rank timings, norms and the
    method's state when `measured`) and the bytes each rank sent."""

    step: int
    kernels: str
    metrics: dict[str, Any]
    sent: Any  # numpy [W]
    outcome: SparsifyOutcome


class Replay:
    """W hosted ranks of one method replaying the pool through the real step (module docstring)."""

    def __init__(self, cfg: DictConfig, pool: GradientPool) -> None:
        self.cfg, self.pool = cfg, pool
        runtime = resolve(cfg)  # cfg's device (the study writes cpu or cuda)
        self.world: World = init_world(cfg.workers, runtime.device, runtime.backend, cfg.launcher.timeout_s,
                                       NetworkModel.from_config(cfg.network), cfg.reduction)
        if self.world.processes != 1:
            raise RuntimeError("the selection study hosts every rank in this process: run it without torchrun")
        sparsifiers = [build_sparsifier(cfg, pool.layout, rank) for rank in self.world.local_ranks]
        out = torch.zeros(pool.numel, dtype=pool.gradients.dtype, device=self.world.device)
        self.ranks = HostedRanks(self.world, sparsifiers, out)

    @property
    def method(self) -> Sparsifier:
        return self.ranks.method

    def step(self, step: int, kernels: str, measured: bool) -> StepRecord:
        """One step on the `kernels` path: accumulate every rank's pool gradient, then phases 2-5.
        No loss and no compute time in the per-rank rows (no forward/backward: NaN, logged as null)."""
        set_kernel_backend(kernels)
        world, ranks = self.world, self.ranks
        world.comm.meter.reset()
        started = time.perf_counter()
        for index, rank in enumerate(world.local_ranks):
            ranks.accumulate(index, self.pool.gradient(rank, step))
        outcome = ranks.step(step, measured)
        world.synchronize()
        step_ms = (time.perf_counter() - started) * 1e3
        metrics = ranks.metrics(outcome)
        if measured:
            metrics.update(ranks.rank_metrics(outcome, step_ms))
            metrics.update(ranks.method.metrics())
        else:  # a settle row: the method's state, no per-rank timings (nothing was timed)
            metrics.update({key: value for key, value in ranks.method.metrics().items() if not isinstance(value, list)})
        return StepRecord(step, kernels, metrics, world.comm.meter.sent.copy(), outcome)


# -- run directories --------------------------------------------------------------------------------
class RunWriter:
    """One run directory of the study, written as the launcher and the rank process write theirs."""

    def __init__(self, cfg: DictConfig, run_dir: Path, group: str) -> None:
        self.cfg = cfg
        job = {"name": f"{group}/{run_dir.name}", "group": group, "num": None,
               "overrides": [], "choices": {}, "study": "experiments.studies.reproduce.selection"}
        self.store, self.env = prepare_run_dir(cfg, run_dir, job)
        self.sink = JsonlSink(self.store.open_metrics())
        self.accumulator = SummaryAccumulator(cfg.warmup_steps)
        self.timed_select_ms: list[float] = []
        self.timed_errors: list[float] = []

    def every_step(self, record: StepRecord) -> None:
        """Every step of the trajectory counts in the bytes sent (as every training step does)."""
        self.accumulator.add_step(record.metrics, record.sent)

    def log(self, record: StepRecord, elapsed_s: float) -> None:
        row = {**record.metrics, keys.ELAPSED: elapsed_s}
        self.accumulator.add_logged(record.step, row)
        self.sink.log({keys.ROW_KIND: keys.KIND_TRAIN, **row}, record.step)
        if record.step >= self.cfg.warmup_steps:
            self.timed_select_ms.append(row[keys.SELECT_MAX])
            self.timed_errors.append(row[keys.DENSITY_ERROR])

    def finish(self, replay: Replay, pool: GradientPool, wall_s: float, extra: dict[str, Any]) -> None:
        self.sink.close()
        summary = self.accumulator.summary()
        summary.update(
            steps=self.cfg.max_steps, wall_s=wall_s, world=replay.world.kind,
            workers=self.cfg.workers, processes=replay.world.processes, **replay.ranks.summary_fields(),
            task={**pool.task, "eval_limit": self.cfg.eval_limit}, dataset=pool.data,
            wandb_mode="disabled", replay={**extra, "pool": pool.describe(self.cfg)},
        )
        self.store.write_json(SUMMARY, summary)
        self.store.set_status("done", ended=time.time(), elapsed_s=wall_s)

    def fail(self, error: BaseException) -> None:
        """The run did not finish: status failed, as run.py records a failed job."""
        self.sink.close(failed=True)
        self.store.set_status("failed", ended=time.time(), error=f"{type(error).__name__}: {error}")

    @property
    def dir(self) -> Path:
        return self.store.dir


# -- the study ------------------------------------------------------------------------------------
@dataclass
class Measured:
    """One (method, W): its trajectory's numbers and the two run directories."""

    method: str
    workers: int
    settle_steps: int
    timed_steps: int
    settled_error: float  # mean density/error over the timed steps (both paths: one trajectory)
    median_error: float  # their median
    max_abs_error: float  # largest |density/error| of a timed step
    median_select_ms: dict[str, float]  # kernels -> median time/select_ms_max of its timed steps
    wall_s: float
    run_dirs: list[Path] = field(default_factory=list)

    def line(self) -> str:
        medians = ", ".join(f"{kernels} {ms:.3g}" for kernels, ms in self.median_select_ms.items())
        unsettled = self.method in THRESHOLD_METHODS and abs(self.settled_error) > BAND
        return (f"{self.method:>6} W={self.workers:<2}  density error of the {2 * self.timed_steps} timed steps after "
                f"{self.settle_steps}: mean {self.settled_error:+.3f}{' (outside +-%g)' % BAND if unsettled else ''}, "
                f"median {self.median_error:+.3f}, max |error| {self.max_abs_error:.2f}; "
                f"median select ms max: {medians}  [{self.wall_s:.1f} s]")


def measure(cfg: DictConfig, pool: GradientPool, out: Path, settle: int, timed: int) -> Measured:
    """Settles and times one (method, W) and writes its two run directories."""
    started = time.perf_counter()
    writers = {kernels: RunWriter(with_kernels(cfg, kernels), out / f"{cfg.sparsifier.name}_w{cfg.workers}_{kernels}",
                                  out.name) for kernels in KERNEL_PATHS}
    timed_errors: list[float] = []
    try:
        replay = Replay(cfg, pool)
        for step in range(settle + 2 * timed):
            kernels = SETTLE_KERNELS if step < settle else KERNEL_PATHS[(step - settle) % len(KERNEL_PATHS)]
            record = replay.step(step, kernels, measured=step >= settle)
            elapsed = time.perf_counter() - started
            for path, writer in writers.items():
                writer.every_step(record)
                if step < settle or path == kernels:
                    writer.log(record, elapsed)
            if step >= settle:
                timed_errors.append(record.metrics[keys.DENSITY_ERROR])
    except BaseException as error:
        for writer in writers.values():
            writer.fail(error)
        raise
    wall_s = time.perf_counter() - started
    extra = {"settle_steps": settle, "settle_kernels": SETTLE_KERNELS, "timed_steps_per_path": timed,
             "timed_order": f"steps {settle} + 2j on {KERNEL_PATHS[0]}, {settle} + 2j + 1 on {KERNEL_PATHS[1]}",
             "not_done": "forward/backward and the optimizer step (gradients replayed from the pool)"}
    for writer in writers.values():
        writer.finish(replay, pool, wall_s, extra)
    medians = {kernels: statistics.median(writer.timed_select_ms) for kernels, writer in writers.items()}
    return Measured(cfg.sparsifier.name, cfg.workers, settle, timed,
                    settled_error=statistics.fmean(timed_errors), median_error=statistics.median(timed_errors),
                    max_abs_error=max(abs(e) for e in timed_errors),
                    median_select_ms=medians, wall_s=wall_s, run_dirs=[writer.dir for writer in writers.values()])


def run_selection_study(
    out: Path,
    workers: Sequence[int] = WORKERS,
    methods: Sequence[str] = METHODS,
    density: float = DENSITY,
    settle_steps: int | Mapping[str, int] | None = None,
    timed_steps: int | Mapping[str, int] | None = None,
    model: str = MODEL,
    dataset: str = DATASET,
    pool_size: int | None = None,
    progress: Progress | None = say_now,
    overrides: Sequence[str] = (),
    device: str = "auto",
) -> list[Path]:
    """Runs the study into `out` (a new or empty directory); returns the run directories, two
    per (method, W). `settle_steps`, `timed_steps`: one number for every method or a mapping
    per method ("default" for the rest); None: SETTLE_STEPS, TIMED_STEPS. `overrides`: more
    config overrides for every run (e.g. `launcher.threads_per_process=2`), recorded in config.yaml.
    `device`: auto (the GPU when there is one), cpu or cuda (study_device)."""
    return selection_study(out, workers, methods, density, settle_steps, timed_steps, model, dataset, pool_size,
                           progress, overrides, device)[1]


def selection_study(out: Path, workers: Sequence[int], methods: Sequence[str], density: float,
                    settle_steps: int | Mapping[str, int] | None, timed_steps: int | Mapping[str, int] | None,
                    model: str, dataset: str, pool_size: int | None, progress: Progress | None,
                    overrides: Sequence[str] = (), device: str = "auto") -> tuple[list[Measured], list[Path]]:
    """run_selection_study, returning each (method, W)'s numbers too."""
    say = progress or (lambda line: None)
    device = study_device(device)
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty: the study writes its run directories into a new directory")
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    workers = sorted(int(w) for w in workers)
    plan = {method: (per_method(settle_steps, method, SETTLE_STEPS, DEFAULT_SETTLE),
                     per_method(timed_steps, method, TIMED_STEPS, DEFAULT_TIMED)) for method in methods}
    # The pool, from the config of the study's first run (its model, data, optimizer, batch, seed).
    first = compose_run(run_overrides(methods[0], workers[-1], KERNEL_PATHS[0], *plan[methods[0]], model, dataset, density,
                                      extra=overrides, device=device))
    torch.set_num_threads(resolve(first).threads_per_process)  # as a rank process of this config would
    pool, reused = shared_gradient_pool(first, pool_size or workers[-1])
    # Computed on the CPU (a rank's forward/backward, once), replayed where the ranks are (a copy:
    # the shared pool stays on the CPU).
    pool = replace(pool, gradients=pool.gradients.to(resolve(first).device))
    say(f"pool: {pool.size} real gradients of {first.model.name} on {first.dataset.name} "
        f"(N = {pool.numel:,}, k = {math.floor(density * pool.numel):,} at density {density}) "
        + (f"reused from this process's earlier study (built in {pool.seconds:.1f} s)" if reused else f"in {pool.seconds:.1f} s"))
    # One `epochs` for the whole study, enough for its longest run at its largest W: each run's
    # config stays self-consistent (max_steps governs) and no context differs in it.
    longest = max(settle + 2 * timed for settle, timed in plan.values())
    epochs = max(1, math.ceil(longest / max(1, pool.steps_per_epoch(workers[-1]))))
    warm_up_kernels(pool.gradients.dtype, pool.gradients.device)  # compiled now, not in a timed step
    measured: list[Measured] = []
    for method in methods:
        settle, timed = plan[method]
        for w in workers:
            cfg = compose_run(run_overrides(method, w, KERNEL_PATHS[0], settle, timed, model, dataset, density, epochs,
                                            overrides, device))
            one = measure(cfg, pool, out, settle, timed)
            measured.append(one)
            say(one.line())
    set_kernel_backend("auto")
    say(f"selection study: {len(measured) * len(KERNEL_PATHS)} runs in {out} ({time.perf_counter() - started:.0f} s); "
        f"judge them: python -m analysis.claims {out}")
    return measured, [path for one in measured for path in one.run_dirs]


def table(measured: list[Measured]) -> str:
    """Median time/select_ms_max per method x W x kernels, and the settled density error."""
    workers = sorted({one.workers for one in measured})
    lines = [f"{'method':>6} {'kernels':>7} " + "".join(f"{'W=' + str(w):>10}" for w in workers)]
    for method in dict.fromkeys(one.method for one in measured):
        for kernels in KERNEL_PATHS:
            cells = {one.workers: one.median_select_ms[kernels] for one in measured if one.method == method}
            lines.append(f"{method:>6} {kernels:>7} " + "".join(f"{cells.get(w, float('nan')):>10.3g}" for w in workers))
        errors = {one.workers: one.settled_error for one in measured if one.method == method}
        lines.append(f"{method:>6} {'error':>7} " + "".join(f"{errors.get(w, float('nan')):>+10.3f}" for w in workers))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.studies.reproduce.selection", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="a new directory for the run directories")
    parser.add_argument("--quick", action="store_true", help="the test suite's version: MLP, W = 2, 4, a few steps")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--workers", default=None, help="comma list (default 2,4,8,16; --quick 2,4)")
    parser.add_argument("--settle", type=int, default=None, help="settle steps for every method (default: per method)")
    parser.add_argument("--timed", type=int, default=None, help="timed steps per path for every method (default: per method)")
    parser.add_argument("--pool", type=int, default=None, help="gradients in the pool (default: the largest W)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto: the GPU when there is one; cpu forces the CPU")
    parser.add_argument("overrides", nargs="*", help="more config overrides for every run (key=value)")
    args = parser.parse_args(argv)
    options: dict[str, Any] = dict(QUICK) if args.quick else {}
    if args.workers:
        options["workers"] = tuple(int(w) for w in args.workers.split(","))
    if args.settle is not None:
        options["settle_steps"] = args.settle
    if args.timed is not None:
        options["timed_steps"] = args.timed
    if args.pool is not None:
        options["pool_size"] = args.pool
    methods = tuple(m for m in args.methods.split(",") if m)
    options.setdefault("workers", WORKERS)
    try:
        measured, _ = selection_study(args.out, options["workers"], methods, DENSITY, options.get("settle_steps"),
                                      options.get("timed_steps"), options.get("model", MODEL), DATASET,
                                      options.get("pool_size"), say_now, args.overrides, args.device)
    except (FileExistsError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print("\nmedian time/select_ms_max (ms) per method, kernels and W; 'error': mean density error of the timed steps")
    print(table(measured))
    return 0


if __name__ == "__main__":
    sys.exit(main())
