"""Any sparsebench sparsifier as a DDP communication hook, in torch's pattern: a state object and
a hook function (docs/ddp_hook.md).

    state = SparsifierState(ddp_model, "deft", density=0.01)
    ddp_model.register_comm_hook(state, sparsifier_hook)

`register_sparsifier(ddp_model, "deft", density=0.01)` does both and returns the state; it also
takes a config node (a Hydra config's `cfg.sparsifier`), which needs the clone's conf/ checks
and is read only then (config_node.py).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from experiments.engine.ddp.checks import check_model
from experiments.engine.ddp.state import SparsifierState, Stats
from sparsifiers.common.base import Sparsifier


def sparsifier_hook(state, bucket):  # no annotations: DDP compares them to its own types
    """DDP's communication hook (`ddp_model.register_comm_hook(state, sparsifier_hook)`): hands
    `bucket` (a `dist.GradBucket`) to `state` (a `SparsifierState`) and returns the bucket's
    `torch.futures.Future[torch.Tensor]`. The futures complete when the last bucket has been
    exchanged, with the aggregate of the whole gradient."""
    return state.communicate(bucket)


def register_sparsifier(
    model: DistributedDataParallel,
    sparsifier: str | type[Sparsifier] | Mapping[str, Any] = "deft",
    *,
    seed: int = 0,
    reduction: str = "ring",
    kernels: str = "auto",
    optimizer: torch.optim.Optimizer | None = None,
    on_stats: Callable[[Stats], None] | None = None,
    wandb_run: Any = None,
    log_every: int = 1,
    **knobs: Any,
) -> SparsifierState:
    """Builds a `SparsifierState` (every argument is its own) and registers `sparsifier_hook`
    with it on `model`; returns the state. `sparsifier` may also be a config node with a
    `_target_` (e.g. your Hydra config's `cfg.sparsifier`, knobs override it), checked as
    `run.py` checks it: that needs sparsebench's clone (`pip install -e <clone>`)."""
    check_model(model)  # before reading a node: the first thing that can be wrong
    if isinstance(sparsifier, Mapping):
        from experiments.engine.ddp.config_node import method_of_node, sparsifier_node  # the clone's conf/ checks

        sparsifier, knobs = method_of_node(sparsifier_node(sparsifier, knobs)), {}
    state = SparsifierState(model, sparsifier, seed=seed, reduction=reduction, kernels=kernels, optimizer=optimizer,
                            on_stats=on_stats, wandb_run=wandb_run, log_every=log_every, **knobs)
    model.register_comm_hook(state, sparsifier_hook)
    return state
