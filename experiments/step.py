"""One synchronous training step over the ranks this process hosts (DESIGN.md, "The flow").

    1. compute   forward/backward per rank into the flat buffer; acc_r = grad_r + residual_r
    2. plan      the leader's plan, broadcast (DEFT's bins, CLT-k's indices), if declared
    3. select    S_r = sparsifier_r.select(acc_r)                              [timed per rank]
    4. exchange  collectives -> aggregate in the flat buffer (identical on all ranks)
    5. feedback  residual_r = acc_r with transmitted coordinates zeroed; observe(counts)
    6. update    optimizer.step() on the aggregate
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from experiments.exchange import INDEX_DTYPE, ExchangeResult, exchange, sum_in_rank_order
from experiments.replica import Replica
from experiments.world import World
from sparsifiers.base import Feedback


@dataclass
class StepOutcome:
    result: ExchangeResult
    selections: list[torch.Tensor | None]  # per hosted rank, as select returned them
    losses: list[float]  # per hosted rank
    compute_ms: list[float]  # per hosted rank
    select_ms: list[float]  # per hosted rank (plan time included for the leader)
    exchange_ms: float  # this process
    step_ms: float  # this process
    acc_norms: list[float] | None  # per hosted rank, when measured (logging steps)
    residual_norms: list[float] | None


def _elapsed_ms(world: World, start: float) -> float:
    world.synchronize()
    return (time.perf_counter() - start) * 1e3


def train_step(
    world: World,
    model: torch.nn.Module,
    loss_fn: torch.nn.Module,
    flat: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    replicas: list[Replica],
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    step: int,
    measure_norms: bool,
) -> StepOutcome:
    step_start = time.perf_counter()

    # 1. compute: each rank's gradient lands in the flat buffer, then in its accumulator.
    losses, compute_ms = [], []
    for replica, (inputs, labels) in zip(replicas, batches):
        start = time.perf_counter()
        with replica.own_buffers(model):
            flat.zero_()
            loss = loss_fn(model(inputs.to(world.device)), labels.to(world.device))
            loss.backward()
        replica.residual.add_(replica.sparsifier.precondition(flat))
        losses.append(loss.item())
        compute_ms.append(_elapsed_ms(world, start))
    accs = [replica.residual for replica in replicas]
    sparsifier = replicas[0].sparsifier  # every rank runs the same method

    # 2. plan: served by the world before anyone selects. First what every rank contributes to an
    # average (DEFT's global norms): one small allreduce, then the leader's plan, broadcast.
    inputs = [replica.sparsifier.averaged_inputs(replica.residual, step) for replica in replicas]
    if inputs[0] is not None:
        mean = world.comm.all_reduce_sum(sum_in_rank_order(None, inputs)).div_(world.world_size)
        for replica in replicas:
            replica.sparsifier.receive_average(mean, step)
    leader, plan, plan_ms = sparsifier.plan_leader(step), None, 0.0
    if leader is not None:
        local_leader = next((r for r in replicas if r.rank == leader), None)
        start = time.perf_counter()
        mine = local_leader.sparsifier.make_plan(local_leader.residual, step) if local_leader else None
        plan_ms = _elapsed_ms(world, start)
        # Plans travel as int32 (like indices: every model here has < 2**31 elements).
        plan = world.comm.broadcast(mine, leader, INDEX_DTYPE, world.device).long()

    # 3. select: timed per rank, so max and mean over ranks mean what they say.
    selections, select_ms = [], []
    for replica in replicas:
        start = time.perf_counter()
        selections.append(replica.sparsifier.select(replica.residual, step, plan))
        select_ms.append(_elapsed_ms(world, start) + (plan_ms if replica.rank == leader else 0.0))

    acc_norms = [float(acc.norm()) for acc in accs] if measure_norms else None

    # 4. exchange: the aggregate overwrites the flat buffer (param.grad views).
    start = time.perf_counter()
    result = exchange(sparsifier.exchange, selections, accs, flat, world.comm, leader)
    exchange_ms = _elapsed_ms(world, start)

    # 5. feedback: what was transmitted leaves the residual; acc = transmitted + residual exactly.
    feedback = Feedback(step=step, counts=result.counts, aggregated=result.aggregated)
    for replica, zeroed in zip(replicas, result.zeroed):
        if zeroed is None or not replica.sparsifier.error_feedback:
            replica.residual.zero_()
        else:
            replica.residual[zeroed] = 0
        replica.sparsifier.on_residual_zeroed(zeroed)
        replica.sparsifier.observe(feedback)
    residual_norms = [float(r.residual.norm()) for r in replicas] if measure_norms else None

    # 6. update: identical aggregate, identical optimizer state -> identical parameters.
    optimizer.step()
    return StepOutcome(result, selections, losses, compute_ms, select_ms, exchange_ms, _elapsed_ms(world, step_start), acc_norms, residual_norms)
