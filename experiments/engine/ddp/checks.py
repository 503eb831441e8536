"""What a hook refuses before it is registered: one ConfigError naming the setting and the fix.

Each rank checks its own model and optimizer; then the ranks compare their settings in one
all-gather, so that they all refuse together instead of some waiting in a collective until the
process group's timeout.
"""
from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from experiments.engine.core.collectives import check_reduction
from experiments.engine.ddp.methods import Method
from experiments.runformat.errors import ConfigError, require
from sparsifiers.common.kernels import check_backend
from sparsifiers.common.layout import Layout


def check_model(model: Any) -> None:
    require(isinstance(model, DistributedDataParallel),
            f"the sparsebench hook needs a DistributedDataParallel model, got {type(model).__name__}: wrap it first")
    require(dist.get_world_size(model.process_group) == dist.get_world_size(),
            "the hook exchanges over the default process group: build DDP without process_group=")
    require(getattr(model, "mixed_precision", None) is None,
            "DDP's mixed_precision= is not supported: use torch.autocast instead (parameters and gradients stay float32)")
    ignored = getattr(model, "parameters_to_ignore", None)
    require(not ignored, f"DDP ignores {len(ignored or ())} parameters (parameters_to_ignore): the hook "
            "exchanges every trainable parameter; freeze them (requires_grad=False) instead")
    dtypes = {p.dtype for p in model.module.parameters() if p.requires_grad}
    require(dtypes == {torch.float32},
            f"the hook needs float32 parameters, got {sorted(str(d) for d in dtypes)}: keep the parameters "
            "float32 and use torch.autocast for mixed precision")


def check_settings(reduction: str, kernels: str, log_every: int) -> None:
    """The hook's own settings; `reduction` and `kernels` are run.py's keys, checked as run.py checks them."""
    check_reduction(reduction)
    check_backend(kernels)
    require(isinstance(log_every, int) and not isinstance(log_every, bool) and log_every >= 1,
            f"log_every must be a positive integer, got {log_every!r}: set e.g. log_every=10")


def check_optimizer(method: Method, optimizer: torch.optim.Optimizer | None) -> None:
    """A method that applies momentum itself (DGC) needs an optimizer without it, or momentum is
    applied twice; the hook can only check an optimizer it is given."""
    if not method.owns_momentum:
        return
    name = method.name
    require(optimizer is not None, f"sparsifier={name} applies momentum itself: pass optimizer= so that the "
            "hook can check that it has momentum=0")
    momenta = {group.get("momentum", 0.0) for group in optimizer.param_groups}
    require(momenta == {0.0}, f"sparsifier={name} applies momentum itself (momentum correction): build the "
            f"optimizer with momentum=0 (got momentum {sorted(momenta)}), or it is applied twice")


def check_same_on_every_rank(method: Method, settings: dict[str, Any], model: DistributedDataParallel,
                             refused: str | None) -> None:
    """Every rank must run the same method with the same knobs, seed, reduction and logging
    interval (Random-k's shared draw, the exchange's counts and the logging steps' gather rely
    on it; `seed=base + rank`, common in DDP scripts, would give every rank other indices): one
    all-gather at registration, and every rank refuses the same way, naming the first setting
    that differs, or the first rank's own refusal (`refused`)."""
    mine = {"refused": refused, **{f"sparsifier.{key}": value for key, value in method.knobs.items()},
            "sparsifier": method.target, **settings, "model size": Layout.from_module(model.module).numel}
    everyone: list[dict[str, Any]] = [{} for _ in range(dist.get_world_size())]
    first = next(p for p in model.module.parameters() if p.requires_grad)
    # all_gather_object stages its bytes on the current CUDA device: make it the model's.
    with torch.cuda.device(first.device) if first.device.type == "cuda" else contextlib.nullcontext():
        dist.all_gather_object(everyone, mine)
    for rank, theirs in enumerate(everyone):
        if theirs["refused"] is not None:
            raise ConfigError(theirs["refused"] + (f" (on rank {rank})" if dist.get_world_size() > 1 else ""))
    for rank, theirs in enumerate(everyone):
        for key in sorted(set(everyone[0]) | set(theirs)):
            if theirs.get(key) != everyone[0].get(key):
                raise ConfigError(
                    f"{key} differs across ranks ({everyone[0].get(key)} on rank 0, {theirs.get(key)} on rank {rank}): "
                    "pass the same method, knobs, seed, reduction and log_every on every rank"
                )
