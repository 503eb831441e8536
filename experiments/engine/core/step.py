"""One synchronous training step over the ranks this process hosts (docs/architecture.md, "One step").

    1. compute   forward/backward per rank into the flat buffer; acc_r = precondition_r(grad_r)
                 + residual_r (error_feedback.py); a non-finite loss or acc fails the step
                 (finite.py), as does a non-finite aggregate
    2. plan      averaged inputs (DEFT global norms), the leader's plan, broadcast, if declared
    3. select    S_r = sparsifier_r.select(acc_r)                              [timed per rank]
    4. exchange  collectives -> aggregate in the flat buffer (identical on all ranks)
    5. feedback  residual_r = acc_r with transmitted coordinates zeroed, or acc_r - aggregate
                 after a low-rank exchange (error_feedback.py); observe(counts)
    6. update    optimizer.step() on the aggregate; non-finite parameters after it fail the
                 step (finite.py): the update overflowed, not the exchange

With a `SkipGuard` (on_nonfinite=skip, skip.py) a non-finite value skips the step on every rank
instead: the ranks agree after phase 1, before anything is exchanged, and the guard puts back
the state phase 1 changed; a non-finite aggregate skips it after phase 5 the same way, and
non-finite parameters after phase 6 too (the guard also puts back the parameters and the
optimizer's state).

Phases 2 to 5 are sparsify.py's `sparsify_and_exchange`, which `HostedRanks.step` (hosted.py) runs.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from experiments.engine.core.exchange import ExchangeResult
from experiments.engine.core.finite import PARAMETERS, NonFiniteValue, check_accumulator, check_aggregate, check_loss, check_parameters
from experiments.engine.core.hosted import HostedRanks
from experiments.engine.core.replica import Replica
from experiments.engine.core.skip import SkipGuard, SkippedStep
from experiments.engine.core.sparsify import SparsifyOutcome, elapsed_ms
from experiments.engine.core.tasks import Task
from experiments.engine.core.world import World


@dataclass
class StepOutcome:
    sparsified: SparsifyOutcome | None  # None when the step was skipped before the exchange
    losses: list[float]  # per hosted rank
    compute_ms: list[float]  # per hosted rank
    step_ms: float  # this process
    skipped: SkippedStep | None = None  # on_nonfinite=skip: why the step left no trace

    @property
    def result(self) -> ExchangeResult:
        return self.sparsified.result

    @property
    def selections(self) -> list[torch.Tensor | None]:
        return self.sparsified.selections


def train_step(
    ranks: HostedRanks,
    model: torch.nn.Module,
    task: Task,
    optimizer: torch.optim.Optimizer,
    replicas: list[Replica],
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    step: int,
    measure_norms: bool,
    guard: SkipGuard | None = None,
    position_bins: int = 0,
) -> StepOutcome:
    """One step; a non-finite value fails it (NonFiniteValue), or with `guard` skips it.
    `position_bins` > 0 (with `measure_norms`): the step also histograms where its coordinates lie.
    `ranks` hold the sparsifiers and residuals; their aggregate buffer is the flat gradient buffer."""
    world, flat = ranks.world, ranks.out
    step_start = time.perf_counter()
    if guard is not None:
        guard.save(ranks, replicas, model)

    # 1. compute: each rank's gradient lands in the flat buffer, then in its accumulator.
    losses, compute_ms = [], []
    for index, (replica, batch) in enumerate(zip(replicas, batches)):
        start = time.perf_counter()
        with replica.own_buffers(model):
            flat.zero_()
            loss = task.loss(model, batch, replica.task_state)
            loss.backward()
        losses.append(loss.item())
        try:
            check_loss(losses[-1], step, replica.rank)
            gradient = ranks.accumulate(index, flat)
            check_accumulator(ranks.residuals[index], gradient, step, replica.rank)
        except NonFiniteValue as error:
            if guard is None:
                raise
            guard.found(index, error)
        compute_ms.append(elapsed_ms(world, start))
    if guard is not None:
        skipped = guard.agree(world, step)
        if skipped is not None:
            guard.restore(ranks, replicas, model)
            return StepOutcome(None, losses, compute_ms, elapsed_ms(world, step_start), skipped)

    # 2.-5. the aggregate overwrites the flat buffer (param.grad views).
    sparsified = ranks.step(step, measure_norms, position_bins=position_bins if measure_norms else 0)

    # 6. update: identical aggregate, identical optimizer state -> identical parameters.
    def skipped_after_exchange(what: str) -> StepOutcome:
        """The same on every rank (aggregate and parameters are): no agreement needed."""
        guard.restore(ranks, replicas, model)
        return StepOutcome(sparsified, losses, compute_ms, elapsed_ms(world, step_start), SkippedStep(step, None, what))

    try:
        check_aggregate(flat, step)
    except NonFiniteValue:
        if guard is None:
            raise
        return skipped_after_exchange("aggregate")
    if guard is not None:
        guard.save_update(model, optimizer)
    optimizer.step()
    try:
        check_parameters(model, step)
    except NonFiniteValue:
        if guard is None:
            raise
        guard.restore_update(model, optimizer)
        return skipped_after_exchange(PARAMETERS)
    return StepOutcome(sparsified, losses, compute_ms, elapsed_ms(world, step_start))
