"""Records what every real step did, for tests that recompute it independently.

`record_steps()` wraps what the hosted ranks call (experiments/engine/core/hosted.py, every driver's
step): `sparsify_and_exchange` (phases 2 to 5) and the accumulate rule (phase 1); and the
training loop's `train_step`, for the losses and the step's times. It keeps, per step, each
hosted rank's acc as select saw it, its selection, the common units, the leader's plan, the aggregate, each residual afterwards, the exchange's result,
the traffic meter (bytes per rank and the list of collectives) and the per-rank timings and norms.
The production code runs unchanged: the wrapper only copies tensors before and after it.

    with record_steps() as steps:
        train_step(...)            # or the whole training loop (experiments/engine/rank/train.py)
    steps[0].aggregate, steps[0].collectives, ...
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch

import experiments.engine.core.hosted as hosted_module
import experiments.engine.rank.train as train_module
from experiments.engine.core.ledger import Collective
from sparsifiers.common.capabilities import SharedIndices, capable
from sparsifiers.common.exchange_kinds import ExchangeKind


@dataclass
class RecordedStep:
    step: int
    world_size: int
    kind: ExchangeKind
    error_feedback: bool
    accs: list[torch.Tensor]  # per hosted rank: acc as select saw it
    selections: list[torch.Tensor | None]  # per hosted rank: sorted int64 (None: dense)
    shared: torch.Tensor | None  # the common units C the method declared after select
    leader: int | None
    plan: torch.Tensor | None
    aggregate: torch.Tensor
    residuals: list[torch.Tensor]  # per hosted rank, after the feedback phase
    counts: list[int]
    aggregated: int
    shared_count: int
    sent: np.ndarray  # per logical rank, bytes of this step
    recv: np.ndarray
    collectives: list[Collective]
    select_ms: list[float]
    exchange_ms: float
    acc_norms: list[float] | None
    residual_norms: list[float] | None
    # Phase 1, when train_step ran it: each rank's residual before accumulating, and the
    # preconditioned gradient added to it.
    carried: list[torch.Tensor] | None = None
    gradients: list[torch.Tensor] | None = None
    # The losses and the step's times, when the training loop's train_step ran it (the harness
    # sets the sizes itself).
    parameter_sizes: list[int] | None = None  # numel of each parameter tensor, in the flat buffer's order
    parameter_shapes: list[tuple[int, ...]] | None = None  # their shapes (PowerSGD's matrices)
    losses: list[float] | None = None
    compute_ms: list[float] | None = None
    step_ms: float | None = None


def _sorted(selection: torch.Tensor | None) -> torch.Tensor | None:
    return None if selection is None else torch.sort(selection.detach().cpu().long()).values


@contextlib.contextmanager
def record_steps() -> Iterator[list[RecordedStep]]:
    """Every step `sparsify_and_exchange` runs inside the block is appended to the list."""
    original, accumulate = hosted_module.sparsify_and_exchange, hosted_module.accumulate
    recorded: list[RecordedStep] = []
    phase_one: list[tuple[torch.Tensor, torch.Tensor]] = []  # this step's (carried, gradient) per rank

    def accumulating(sparsifier, residual, grad):
        carried = residual.detach().cpu().clone()
        gradient = accumulate(sparsifier, residual, grad)
        phase_one.append((carried, gradient.detach().cpu().clone()))
        return gradient

    def recording(world, sparsifiers, accs, out, step, measure_norms=False, **kwargs):
        method = sparsifiers[0]
        declared: list[torch.Tensor | None] = []
        sharing = capable(method, SharedIndices)  # the others declare none: nothing to record
        if sharing:
            asked = method.shared_indices

            def shared_indices(at_step):  # what the exchange is told, exactly once per step
                declared.append(asked(at_step))
                return declared[-1]

            method.shared_indices = shared_indices
        before = [acc.detach().cpu().clone() for acc in accs]
        try:
            outcome = original(world, sparsifiers, accs, out, step, measure_norms, **kwargs)
        finally:
            if sharing:
                del method.shared_indices  # the instance attribute: the class's method again
        meter = world.comm.meter
        shared = declared[0] if declared else None
        recorded.append(RecordedStep(
            step=step, world_size=world.world_size, kind=method.exchange, error_feedback=method.error_feedback,
            accs=before, selections=[_sorted(s) for s in outcome.selections],
            shared=_sorted(shared), leader=outcome.leader,
            plan=None if outcome.plan is None else outcome.plan.detach().cpu().clone(),
            aggregate=out.detach().cpu().clone(), residuals=[acc.detach().cpu().clone() for acc in accs],
            counts=[int(c) for c in outcome.result.counts], aggregated=outcome.result.aggregated,
            shared_count=outcome.result.shared, sent=meter.sent.copy(), recv=meter.recv.copy(),
            collectives=list(meter.collectives), select_ms=list(outcome.select_ms), exchange_ms=outcome.exchange_ms,
            acc_norms=outcome.acc_norms, residual_norms=outcome.residual_norms,
            carried=[c for c, _ in phase_one] or None, gradients=[g for _, g in phase_one] or None,
        ))
        phase_one.clear()
        return outcome

    train_step = train_module.train_step

    def training(*args, **kwargs):
        outcome = train_step(*args, **kwargs)
        if outcome.sparsified is not None:
            step = recorded[-1]
            step.losses, step.compute_ms, step.step_ms = outcome.losses, outcome.compute_ms, outcome.step_ms
            model = kwargs["model"] if "model" in kwargs else args[1]
            step.parameter_sizes = [p.numel() for p in model.parameters()]
            step.parameter_shapes = [tuple(p.shape) for p in model.parameters()]
        return outcome

    hosted_module.sparsify_and_exchange, hosted_module.accumulate, train_module.train_step = recording, accumulating, training
    try:
        yield recorded
    finally:
        hosted_module.sparsify_and_exchange, hosted_module.accumulate, train_module.train_step = original, accumulate, train_step


PER_RANK = ("accs", "selections", "residuals", "select_ms", "carried", "gradients")


def merge_processes(per_process: list[list[RecordedStep]]) -> list[RecordedStep]:
    """The records of a world's processes (in process order, so in rank order) as one world:
    per-rank fields joined, the rest from process 0. The tests check first that the fields
    every process holds alike (aggregate, counts, traffic) are alike."""
    merged = []
    for steps in zip(*per_process):
        first = steps[0]
        joined = {name: [item for s in steps for item in getattr(s, name)] for name in PER_RANK}
        merged.append(dataclasses.replace(first, **joined))
    return merged
