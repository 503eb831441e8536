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
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from experiments.core import positions
from experiments.core.error_feedback import keep_residual
from experiments.core.exchange import INDEX_DTYPE, ExchangeRequest, ExchangeResult, exchange
from experiments.core.finite import PARAMETERS, NonFiniteValue, check_accumulator, check_aggregate, check_loss, check_parameters
from experiments.core.phases import NO_CLOCK, PhaseClock
from experiments.core.replica import Replica
from experiments.core.skip import SkipGuard, SkippedStep
from experiments.core.tasks import Task
from experiments.core.world import World
from sparsifiers.base import Sparsifier
from sparsifiers.capabilities import AveragedInputs, capable, leader_of, shared_of
from sparsifiers.exchange_kinds import Feedback

if TYPE_CHECKING:  # hosted.py drives sparsify_and_exchange below
    from experiments.core.hosted import HostedRanks


@dataclass
class SparsifyOutcome:
    """Phases 2 to 5 of one step, for the ranks this process hosts."""

    result: ExchangeResult
    leader: int | None
    plan: torch.Tensor | None
    selections: list[torch.Tensor | None]  # per hosted rank, as select returned them
    select_ms: list[float]  # per hosted rank (plan time included for the leader)
    exchange_ms: float
    acc_norms: list[float] | None  # per hosted rank, when measured (logging steps)
    residual_norms: list[float] | None
    # With position_bins (logging steps, on the process hosting rank 0): where U and rank 0's
    # accumulator energy lie (experiments/core/positions.py).
    positions: list[int] | None = None
    energy: list[float] | None = None


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


def _elapsed_ms(world: World, start: float) -> float:
    world.synchronize()
    return (time.perf_counter() - start) * 1e3


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
        compute_ms.append(_elapsed_ms(world, start))
    if guard is not None:
        skipped = guard.agree(world, step)
        if skipped is not None:
            guard.restore(ranks, replicas, model)
            return StepOutcome(None, losses, compute_ms, _elapsed_ms(world, step_start), skipped)

    # 2.-5. the aggregate overwrites the flat buffer (param.grad views).
    sparsified = ranks.step(step, measure_norms, position_bins=position_bins if measure_norms else 0)

    # 6. update: identical aggregate, identical optimizer state -> identical parameters.
    def skipped_after_exchange(what: str) -> StepOutcome:
        """The same on every rank (aggregate and parameters are): no agreement needed."""
        guard.restore(ranks, replicas, model)
        return StepOutcome(sparsified, losses, compute_ms, _elapsed_ms(world, step_start), SkippedStep(step, None, what))

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
    return StepOutcome(sparsified, losses, compute_ms, _elapsed_ms(world, step_start))


def sparsify_and_exchange(
    world: World,
    sparsifiers: list[Sparsifier],
    accs: list[torch.Tensor],
    out: torch.Tensor,
    step: int,
    measure_norms: bool = False,
    clock: PhaseClock = NO_CLOCK,
    position_bins: int = 0,
) -> SparsifyOutcome:
    """Phases 2 to 5 for the hosted ranks: `accs` (one per rank, the residual buffers holding
    acc) become residuals in place, and the aggregate is written into `out`. `clock` times the
    phases (the step benchmark); the default does nothing. `position_bins` > 0: the process
    hosting rank 0 also histograms U and rank 0's accumulator (experiments/core/positions.py)."""
    method = sparsifiers[0]  # every rank runs the same method
    ranks = world.local_ranks

    # 2. plan: served by the world before anyone selects. First what every rank contributes to an
    # average (DEFT's global norms, a calibrated threshold start): one small allreduce, then the
    # leader's plan, broadcast. Only methods with the capability (sparsifiers/capabilities.py).
    inputs = ([sparsifier.averaged_inputs(acc, step) for sparsifier, acc in zip(sparsifiers, accs)]
              if capable(method, AveragedInputs) else [None])
    if inputs[0] is not None:
        mean = world.comm.sum_over_ranks(inputs).div_(world.world_size)
        for sparsifier in sparsifiers:
            sparsifier.receive_average(mean, step)
    leader, plan, plan_ms = leader_of(method, step), None, 0.0
    if leader is not None:
        start = time.perf_counter()
        here = ranks.index(leader) if leader in ranks else None
        mine = sparsifiers[here].make_plan(accs[here], step) if here is not None else None
        plan_ms = _elapsed_ms(world, start)
        # Plans travel as int32 (like indices: every model here has < 2**31 elements); a plan
        # whose length every rank knows travels without its size header.
        length = method.plan_length(step)
        shape = None if length is None else (length,)
        plan = world.comm.broadcast(mine, leader, INDEX_DTYPE, world.device, shape).long()
    clock.mark("plan")

    # 3. select: timed per rank, so max and mean over ranks mean what they say.
    selections, select_ms = [], []
    for rank, sparsifier, acc in zip(ranks, sparsifiers, accs):
        start = time.perf_counter()
        selections.append(sparsifier.select(acc, step, plan))
        select_ms.append(_elapsed_ms(world, start) + (plan_ms if rank == leader else 0.0))
    clock.mark("select")

    acc_norms = [float(acc.norm()) for acc in accs] if measure_norms else None
    histogram = bool(position_bins) and ranks[0] == 0  # rank 0's process logs
    acc_energy = positions.energy(accs[0], position_bins) if histogram else None
    clock.start()  # norms are measured on logging steps only: no phase of the step

    # 4. exchange, with the coordinates every rank adds unexchanged (DEFT's common units) and
    # the counts every rank knows (then no size header travels): the same on every rank by
    # contract, so the first hosted rank's stand for all.
    start = time.perf_counter()
    request = ExchangeRequest(selections, accs, out, world.comm, sparsifiers, step, leader, shared_of(method, step),
                              method.known_counts(step), clock)
    result = exchange(method.exchange, request)
    exchange_ms = _elapsed_ms(world, start)

    # 5. feedback: what was transmitted leaves the residual; acc = transmitted + residual exactly.
    feedback = Feedback(step=step, counts=result.counts, aggregated=result.aggregated)
    for sparsifier, acc, zeroed in zip(sparsifiers, accs, result.zeroed):
        keep_residual(sparsifier, acc, zeroed, result.subtracted)
        sparsifier.on_residual_zeroed(zeroed)
        sparsifier.observe(feedback)
    clock.mark("residual")
    residual_norms = [float(acc.norm()) for acc in accs] if measure_norms else None
    union_positions = positions.position_counts(out, position_bins) if histogram else None
    return SparsifyOutcome(result, leader, plan, selections, select_ms, exchange_ms, acc_norms, residual_norms,
                           union_positions, acc_energy)
