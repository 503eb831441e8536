"""Phases 2 to 5 of one step, for the ranks this process hosts: plan, select, exchange, feedback
(docs/architecture.md, "One step"; phases 1 and 6, compute and update, are step.py's). The
hosted ranks' `HostedRanks.step` (hosted.py) drives it in training, the selection replay, the DDP
hook, the benchmarks and the tests alike.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from experiments.engine.core import positions
from experiments.engine.core.error_feedback import keep_residual
from experiments.engine.core.exchange import INDEX_DTYPE, ExchangeRequest, ExchangeResult, exchange
from experiments.engine.core.phases import NO_CLOCK, PhaseClock
from experiments.engine.core.stopwatch import Stopwatch
from experiments.engine.core.world import World
from sparsifiers.common.base import Sparsifier
from sparsifiers.common.capabilities import AveragedInputs, capable, leader_of, shared_of
from sparsifiers.common.exchange_kinds import Feedback


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
    # accumulator energy lie (experiments/engine/core/positions.py).
    positions: list[int] | None = None
    energy: list[float] | None = None


def elapsed_ms(world: World, start: float) -> float:
    """Host time since `start`, after the device's queue drained (one sync: phases 1 and 6;
    phases 2-5 read a Stopwatch once per step instead)."""
    world.synchronize()
    return (time.perf_counter() - start) * 1e3


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
    hosting rank 0 also histograms U and rank 0's accumulator (experiments/engine/core/positions.py)."""
    method = sparsifiers[0]  # every rank runs the same method
    ranks = world.local_ranks

    # 2. plan: served by the world before anyone selects. First what every rank contributes to an
    # average (DEFT's global norms, a calibrated threshold start): one small allreduce, then the
    # leader's plan, broadcast. Only methods with the capability (sparsifiers/common/capabilities.py).
    inputs = ([sparsifier.averaged_inputs(acc, step) for sparsifier, acc in zip(sparsifiers, accs)]
              if capable(method, AveragedInputs) else [None])
    if inputs[0] is not None:
        mean = world.comm.sum_over_ranks(inputs).div_(world.world_size)
        for sparsifier in sparsifiers:
            sparsifier.receive_average(mean, step)
    # Times are marks read after one synchronize at the end of the step (stopwatch.py).
    watch = Stopwatch(world.device)
    leader, plan, plan_marks = leader_of(method, step), None, None
    if leader is not None:
        start = watch.mark()
        here = ranks.index(leader) if leader in ranks else None
        mine = sparsifiers[here].make_plan(accs[here], step) if here is not None else None
        plan_marks = (start, watch.mark())
        # Plans travel as int32 (like indices: every model here has < 2**31 elements); a plan
        # whose length every rank knows travels without its size header.
        length = method.plan_length(step)
        shape = None if length is None else (length,)
        plan = world.comm.broadcast(mine, leader, INDEX_DTYPE, world.device, shape).long()
    clock.mark("plan")

    # 3. select: timed per rank, so max and mean over ranks mean what they say.
    selections, select_marks = [], [watch.mark()]
    for sparsifier, acc in zip(sparsifiers, accs):
        selections.append(sparsifier.select(acc, step, plan))
        select_marks.append(watch.mark())
    clock.mark("select")

    acc_norms = [float(acc.norm()) for acc in accs] if measure_norms else None
    histogram = bool(position_bins) and ranks[0] == 0  # rank 0's process logs
    acc_energy = positions.energy(accs[0], position_bins) if histogram else None
    clock.start()  # norms are measured on logging steps only: no phase of the step

    # 4. exchange, with the coordinates every rank adds unexchanged (DEFT's common units) and
    # the counts every rank knows (then no size header travels): the same on every rank by
    # contract, so the first hosted rank's stand for all.
    exchange_start = watch.mark()
    request = ExchangeRequest(selections, accs, out, world.comm, sparsifiers, step, leader, shared_of(method, step),
                              method.known_counts(step), clock)
    result = exchange(method.exchange, request)
    exchange_end = watch.mark()
    watch.settle(world.synchronize)
    plan_ms = watch.ms(*plan_marks) if plan_marks is not None else 0.0
    select_ms = [watch.ms(begin, end) + (plan_ms if rank == leader else 0.0)
                 for rank, begin, end in zip(ranks, select_marks, select_marks[1:])]
    exchange_ms = watch.ms(exchange_start, exchange_end)

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
