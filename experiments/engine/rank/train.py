"""The training loop of one rank-hosting process, top to bottom: set-up, epochs, summary."""
from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from experiments.engine.rank.build import build_dataset, build_model, build_optimizer, build_schedule, build_sparsifier
from experiments.engine.rank.checkpoint import Checkpointer, Resumed, restore
from experiments.engine.core.finite import PARAMETERS, UPDATE_HINT, NonFiniteValue
from experiments.engine.core.flat_grad import bind_flat_grad, parameter_checksum
from experiments.engine.core.hosted import HostedRanks
from experiments.engine.core.replica import Replica, make_replicas
from experiments.engine.rank.run_log import RunLog
from experiments.engine.rank.schedule import StepSchedule
from experiments.engine.rank.target import TargetWatch
from experiments.engine.core.skip import SkipGuard
from experiments.engine.core.step import train_step
from experiments.engine.core.tasks import Task, make_task
from experiments.engine.core.world import World
from datasets.base import TaskData
from sparsifiers.common.base import Sparsifier
from sparsifiers.common.kernels import set_backend as set_kernel_backend
from sparsifiers.common.kernels import warm_up as warm_up_kernels
from sparsifiers.common.layout import Layout


class ReplicasDiverged(RuntimeError):
    """Parameters differ between processes: the exchange is broken; continuing would be noise."""


@dataclass
class Session:
    """Everything one process trains with: the shared model, the hosted ranks' sparsification
    (their sparsifiers, residuals and the flat buffer: `ranks`) and their model side (`replicas`)."""

    data: TaskData
    task: Task
    model: torch.nn.Module
    layout: Layout
    optimizer: torch.optim.Optimizer
    schedule: StepSchedule
    ranks: HostedRanks
    replicas: list[Replica]

    @property
    def method(self) -> Sparsifier:
        return self.ranks.method


def build_session(cfg: DictConfig, world: World) -> Session:
    """Identical model on every rank (same seed), flat gradient buffer, one replica per hosted rank."""
    set_kernel_backend(cfg.kernels)
    torch.manual_seed(cfg.seed)
    data = build_dataset(cfg)
    task = make_task(data)
    model = build_model(cfg, data).to(world.device)
    flat, layout = bind_flat_grad(model)
    warm_up_kernels(flat.dtype, flat.device)  # compiled now, not inside step 0's timings
    shards = [task.shard(r, cfg.workers, cfg.batch_size, cfg.seed, world.device) for r in world.local_ranks]
    sparsifiers = [build_sparsifier(cfg, layout, r) for r in world.local_ranks]
    optimizer = build_optimizer(cfg, model, sparsifiers[0])
    schedule = build_schedule(cfg, optimizer)
    ranks = HostedRanks(world, sparsifiers, flat)
    replicas = make_replicas(model, shards, world.local_ranks)
    return Session(data, task, model, layout, optimizer, schedule, ranks, replicas)


def train(cfg: DictConfig, world: World, sink, run_dir: Path, resumed: Resumed | None = None) -> dict[str, Any] | None:
    """Trains (from `resumed`, a loaded checkpoint, if given); returns the summary on the
    process hosting rank 0 (None elsewhere)."""
    session = build_session(cfg, world)
    steps_per_epoch, total_steps = _steps(cfg, session)
    log = RunLog(cfg, world, sink, session)  # summary accumulator, sink, epoch table, clock
    guard = SkipGuard(cfg.max_skipped_steps) if cfg.on_nonfinite == "skip" else None
    step = 0 if resumed is None else resumed.step
    checkpoints = Checkpointer(cfg, run_dir, world, steps_per_epoch, total_steps, step if resumed else None)
    watch = TargetWatch(cfg, session.task.metric)  # eval_target's cadence and stop (experiments/engine/rank/target.py)
    stopped = None  # the steps done when stop_at_target ended the run
    # -- epochs (a resumed run starts in the epoch of its checkpoint, `skip` batches in)
    for epoch in range(step // steps_per_epoch, cfg.epochs):
        if step >= total_steps:
            break
        _start_epoch(session, epoch, steps_per_epoch)
        if resumed is not None:  # after start_epoch: the checkpoint was taken after it too
            restore(resumed.state, session, log.accumulator, world, guard, watch)
            log.started -= resumed.state["elapsed_s"]
            resumed = None
        skip = step - epoch * steps_per_epoch
        epoch_steps = min(steps_per_epoch - skip, total_steps - step)
        log.start_epoch(epoch, epoch_steps)
        for batches in islice(zip(*(r.batches.epoch(epoch) for r in session.replicas)), skip, skip + epoch_steps):
            if checkpoints.due(step):
                checkpoints.save(step, session, log.accumulator, log.elapsed(), guard, watch)
            logging_step = step % cfg.logger.log_every == 0 or step == total_steps - 1
            world.comm.meter.reset()
            lr = _set_learning_rate(session, epoch + (step - epoch * steps_per_epoch) / steps_per_epoch)
            outcome = train_step(session.ranks, session.model, session.task, session.optimizer, session.replicas,
                                 list(batches), step, logging_step, guard, position_bins=cfg.position_bins)
            if guard is not None:
                guard.count(outcome.skipped)
            log.step(outcome, step, epoch, lr, logging_step, guard)
            if cfg.checksum_every and step % cfg.checksum_every == 0:
                _check_replicas_agree(world, session.model, step)
            step += 1
            # -- a mid-epoch evaluation (eval_every_steps, and eval_near_every near eval_target):
            # time-to-accuracy needs the curve between epoch ends; the last step of an epoch (or
            # of the run) is evaluated below, once.
            at_loop_end = step % steps_per_epoch == 0 or step == total_steps  # evaluated below
            if not at_loop_end:
                if watch.due(step) and world.hosts_rank_zero:
                    log.evaluate(epoch, step - 1, watch)
                if watch.stops(world, step):
                    stopped = step
                    break
        log.end_epoch(epoch, step - 1, watch, evaluated=stopped is not None)  # a stop evaluated its step already
        if stopped is None and watch.stops(world, step, epoch_end=True):
            stopped = step
        if stopped is not None:
            break

    _check_replicas_agree(world, session.model, step)
    return log.summary(step, epoch + 1, guard, stopped) if world.hosts_rank_zero else None


def _steps(cfg: DictConfig, session: Session) -> tuple[int, int]:
    """Steps per epoch (every rank's shard gives the same) and the steps of the whole run."""
    batches = session.replicas[0].batches
    if batches.steps_per_epoch == 0:
        raise ValueError(
            f"batch_size={cfg.batch_size} is larger than each worker's shard "
            f"({batches.examples} examples): lower batch_size or workers"
        )
    all_steps = cfg.epochs * batches.steps_per_epoch
    return batches.steps_per_epoch, all_steps if cfg.max_steps is None else min(cfg.max_steps, all_steps)


def _start_epoch(session: Session, epoch: int, steps_per_epoch: int) -> None:
    """Every hosted rank's method (DGC's warm-up follows epochs) and task state (the LSTM's)."""
    session.model.train()
    for sparsifier, replica in zip(session.ranks.sparsifiers, session.replicas):
        sparsifier.start_epoch(epoch, steps_per_epoch)
        session.task.start_epoch(replica.task_state)


def _set_learning_rate(session: Session, epoch: float) -> float:
    """The schedule's learning rate at `epoch` (fractional), set before the step: Accordion's
    detection compares learning rates."""
    lr = session.schedule.set_epoch(epoch)
    for sparsifier in session.ranks.sparsifiers:
        sparsifier.set_learning_rate(lr)
    return lr


def _check_replicas_agree(world: World, model: torch.nn.Module, step: int) -> None:
    """Fails loudly if processes hold different parameters (hosted ranks share them). NaN never
    equals NaN, so non-finite parameters are told apart first: they are a diverged update (or a
    bad checkpoint), not a broken exchange."""
    if world.processes == 1:
        return
    checksums = world.comm.gather_stats(parameter_checksum(model).to(world.device).view(1, 2)).cpu()
    non_finite = [process for process, row in enumerate(checksums) if not bool(torch.isfinite(row).all())]
    if len(non_finite) == len(checksums):
        raise NonFiniteValue(f"non-finite parameters at step {step} on every process: {UPDATE_HINT}", PARAMETERS)
    if non_finite:  # the same update everywhere cannot do this: the processes really differ
        raise ReplicasDiverged(
            f"parameters differ across processes at step {step}: non-finite on process(es) {non_finite} "
            f"of {len(checksums)} only: {checksums.tolist()}"
        )
    if not torch.equal(checksums, checksums[:1].expand_as(checksums)):
        raise ReplicasDiverged(f"parameters differ across processes at step {step}: {checksums.tolist()}")
