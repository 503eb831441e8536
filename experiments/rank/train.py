"""The training loop of one rank-hosting process, top to bottom: set-up, epochs, summary."""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from experiments import metric_keys as keys
from experiments.rank.build import build_dataset, build_model, build_optimizer, build_schedule, build_sparsifier
from experiments.rank.checkpoint import Checkpointer, Resumed, restore
from experiments.core.finite import PARAMETERS, UPDATE_HINT, NonFiniteValue
from experiments.core import ledger
from experiments.core.flat_grad import bind_flat_grad, parameter_checksum, parameters_sha256
from experiments.core.metrics import RANK_STATS, MetricContext, exchange_metrics, rank_metrics
from experiments.rank.summary import SummaryAccumulator
from experiments.core.replica import Replica, make_replicas
from experiments.rank.report import EpochTable
from experiments.rank.schedule import StepSchedule
from experiments.rank.target import TargetWatch
from experiments.core.skip import SkipGuard
from experiments.rank.skipped import log_skipped
from experiments.core.step import train_step
from experiments.core.tasks import Task, describe_task, make_task
from experiments.core.traffic import dense_allreduce_bytes
from experiments.core.world import World
from datasets.base import TaskData
from sparsifiers.base import Sparsifier
from sparsifiers.kernels import set_backend as set_kernel_backend
from sparsifiers.kernels import warm_up as warm_up_kernels
from sparsifiers.layout import Layout


class ReplicasDiverged(RuntimeError):
    """Parameters differ between processes: the exchange is broken; continuing would be noise."""


@dataclass
class Session:
    """Everything one process trains with: the shared model and the replicas it hosts."""

    data: TaskData
    task: Task
    model: torch.nn.Module
    flat: torch.Tensor
    layout: Layout
    optimizer: torch.optim.Optimizer
    schedule: StepSchedule
    replicas: list[Replica]
    context: MetricContext

    @property
    def method(self) -> Sparsifier:
        return self.replicas[0].sparsifier


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
    replicas = make_replicas(model, flat, sparsifiers, shards, world.local_ranks)
    method = sparsifiers[0]
    context = MetricContext(
        numel=layout.numel,
        k_target=method.k,
        density=method.density,
        scope=method.scope,
        world_size=cfg.workers,
        dense_bytes=dense_allreduce_bytes(layout.numel, cfg.workers, flat.element_size()),
        dense_model_ms=_dense_model_ms(world, layout.numel * flat.element_size()),
        exchange=method.exchange,
    )
    return Session(data, task, model, flat, layout, optimizer, schedule, replicas, context)


def _dense_model_ms(world: World, nbytes: int) -> float | None:
    network = world.comm.meter.network
    return None if network is None else network.all_reduce_s(world.world_size, nbytes) * 1e3


def train(cfg: DictConfig, world: World, sink, run_dir: Path, resumed: Resumed | None = None) -> dict[str, Any] | None:
    """Trains (from `resumed`, a loaded checkpoint, if given); returns the summary on the
    process hosting rank 0 (None elsewhere)."""
    session = build_session(cfg, world)
    data, task, model, flat, layout = session.data, session.task, session.model, session.flat, session.layout
    optimizer, schedule, replicas, context, method = session.optimizer, session.schedule, session.replicas, session.context, session.method
    steps_per_epoch = replicas[0].batches.steps_per_epoch
    if steps_per_epoch == 0:
        raise ValueError(
            f"batch_size={cfg.batch_size} is larger than each worker's shard "
            f"({replicas[0].batches.examples} examples): lower batch_size or workers"
        )
    total_steps = cfg.epochs * steps_per_epoch if cfg.max_steps is None else min(cfg.max_steps, cfg.epochs * steps_per_epoch)
    accumulator = SummaryAccumulator(cfg.warmup_steps)
    table = EpochTable(enabled=world.hosts_rank_zero, metric=task.metric)
    table.header(method.describe(), layout.numel, cfg.workers, world.kind)
    log_every, started = cfg.logger.log_every, time.perf_counter()
    guard = SkipGuard(cfg.max_skipped_steps) if cfg.on_nonfinite == "skip" else None
    step = 0 if resumed is None else resumed.step
    checkpoints = Checkpointer(cfg, run_dir, world, steps_per_epoch, total_steps, step if resumed else None)
    watch = TargetWatch(cfg, task.metric)  # eval_target's cadence and stop (experiments/rank/target.py)

    def evaluate_and_log(epoch: int, last_step: int) -> None:
        """Rank 0 evaluates with its own BatchNorm statistics; other ranks go on."""
        evaluation = _evaluate(task, model, replicas[0], world.device, cfg.eval_limit)
        evaluation["epoch"] = epoch
        evaluation[keys.ELAPSED] = time.perf_counter() - started
        accumulator.add_eval(evaluation)
        sink.log({"kind": "eval", **evaluation}, last_step)
        watch.saw(evaluation, last_step + 1)

    stopped = None  # the steps done when stop_at_target ended the run
    # -- epochs (a resumed run starts in the epoch of its checkpoint, `skip` batches in)
    for epoch in range(step // steps_per_epoch, cfg.epochs):
        if step >= total_steps:
            break
        model.train()
        for replica in replicas:
            replica.sparsifier.start_epoch(epoch, steps_per_epoch)
            task.start_epoch(replica.task_state)
        if resumed is not None:  # after start_epoch: the checkpoint was taken after it too
            restore(resumed.state, session, accumulator, world, guard)
            started -= resumed.state["elapsed_s"]
            resumed = None
        skip = step - epoch * steps_per_epoch
        epoch_steps = min(steps_per_epoch - skip, total_steps - step)
        progress = _progress(cfg, world, epoch, epoch_steps)
        for batches in islice(zip(*(r.batches.epoch(epoch) for r in replicas)), skip, skip + epoch_steps):
            if checkpoints.due(step):
                checkpoints.save(step, session, accumulator, time.perf_counter() - started, guard)
            logging_step = step % log_every == 0 or step == total_steps - 1
            world.comm.meter.reset()
            lr = schedule.set_epoch(epoch + (step - epoch * steps_per_epoch) / steps_per_epoch)
            for replica in replicas:  # before the step: Accordion's detection compares learning rates
                replica.sparsifier.set_learning_rate(lr)
            outcome = train_step(world, model, task, flat, optimizer, replicas, list(batches), step, logging_step, guard,
                                 position_bins=cfg.position_bins)
            if guard is not None:
                guard.count(outcome.skipped)
            if outcome.skipped is not None:  # on_nonfinite=skip: logged, then failed past the limit
                log_skipped(sink, accumulator, guard, outcome.skipped, world.hosts_rank_zero,
                            {"epoch": epoch, keys.LR: lr, keys.ELAPSED: time.perf_counter() - started})
            else:
                metrics = exchange_metrics(outcome.result, world.comm.meter, context, method.current_k, method.current_density)
                accumulator.add_step(metrics, world.comm.meter.sent)
                if logging_step:
                    metrics.update(rank_metrics(_gather_rank_stats(world, outcome)))
                    metrics.update(method.metrics())
                    metrics[keys.LEDGER] = ledger.encode(world.comm.meter.collectives)
                    if outcome.sparsified.positions is not None:  # position_bins > 0
                        metrics[keys.POSITIONS] = outcome.sparsified.positions
                        metrics[keys.ENERGY] = outcome.sparsified.energy
                    metrics["epoch"] = epoch
                    metrics[keys.LR] = lr
                    metrics[keys.ELAPSED] = time.perf_counter() - started
                    if guard is not None:
                        metrics[keys.SKIPPED] = 0.0
                    accumulator.add_logged(step, metrics)
                    sink.log({"kind": "train", **metrics}, step)
                    if progress is not None:
                        progress.set_postfix(loss=f"{metrics[keys.LOSS]:.3f}", refresh=False)
            if cfg.checksum_every and step % cfg.checksum_every == 0:
                _check_replicas_agree(world, model, step)
            if progress is not None:
                progress.update(1)
            step += 1
            # -- a mid-epoch evaluation (eval_every_steps, and eval_near_every near eval_target):
            # time-to-accuracy needs the curve between epoch ends; the last step of an epoch (or
            # of the run) is evaluated below, once.
            at_loop_end = step % steps_per_epoch == 0 or step == total_steps  # evaluated below
            if not at_loop_end:
                if watch.due(step) and world.hosts_rank_zero:
                    evaluate_and_log(epoch, step - 1)
                if watch.stops(world, step):
                    stopped = step
                    break
        if progress is not None:
            progress.close()
        # -- evaluation: rank 0 with its own BatchNorm statistics; other ranks go on.
        if world.hosts_rank_zero:
            if stopped is None:  # a stop evaluated its step already
                evaluate_and_log(epoch, step - 1)
            table.row(epoch, accumulator.last)
        if stopped is None and watch.stops(world, step, epoch_end=True):
            stopped = step
        if stopped is not None:
            break

    _check_replicas_agree(world, model, step)
    if not world.hosts_rank_zero:
        return None
    summary = accumulator.summary()
    summary.update(
        steps=step,
        epochs_run=epoch + 1,
        parameters_sha256=parameters_sha256(model),
        wall_s=time.perf_counter() - started,
        world=world.kind,
        workers=cfg.workers,
        processes=world.processes,
        numel=layout.numel,
        tensor_numels=[segment.numel for segment in layout.segments],  # the layout, in parameter order
        k_target=context.k_target,
        sparsifier=method.describe(),
        # The configured target: density/target is, like every headline, the mean of the logged
        # targets (DGC's warm-up stages log their own).
        **{keys.DENSITY_TARGET_CONFIGURED: method.density},
        optimizer={"name": cfg.optimizer.name, "momentum": optimizer.param_groups[0].get("momentum")},
        schedule={"name": cfg.schedule.name, **schedule.describe()},
        task={**describe_task(task), "eval_limit": cfg.eval_limit},
        dataset=data.describe(),
    )
    if guard is not None:
        summary[keys.SKIPPED_STEPS] = guard.total
    if stopped is not None:
        summary["stopped_at_target"] = stopped  # steps done: the first evaluation that reached eval_target
    return summary


def _progress(cfg: DictConfig, world: World, epoch: int, steps: int):
    if not (world.hosts_rank_zero and cfg.logger.progress):
        return None
    from tqdm import tqdm

    return tqdm(total=steps, desc=f"epoch {epoch}", file=sys.stderr, mininterval=1.0, leave=False, dynamic_ncols=True)


def _gather_rank_stats(world: World, outcome) -> torch.Tensor:
    """Per-rank rows in RANK_STATS order, from every process (not counted as traffic)."""
    nan = float("nan")
    rows = []
    for i in range(len(world.local_ranks)):
        rows.append([
            outcome.losses[i],
            outcome.compute_ms[i],
            outcome.sparsified.select_ms[i],
            outcome.sparsified.exchange_ms,
            outcome.step_ms,
            outcome.sparsified.acc_norms[i] if outcome.sparsified.acc_norms else nan,
            outcome.sparsified.residual_norms[i] if outcome.sparsified.residual_norms else nan,
        ])
    local = torch.tensor(rows, dtype=torch.float64, device=world.device)
    assert local.shape[1] == len(RANK_STATS)
    return world.comm.gather_stats(local).cpu()


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


def _evaluate(task: Task, model: torch.nn.Module, replica: Replica, device: torch.device, limit: int | None) -> dict[str, float]:
    """The task's evaluation with rank 0's own BatchNorm statistics, in eval mode."""
    model.eval()
    try:
        with replica.own_buffers(model):
            return task.evaluate(model, device, limit)
    finally:
        model.train()
