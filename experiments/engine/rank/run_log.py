"""What the training loop records: every step's metrics (the summary accumulator), the rows of
logging steps and evaluations (the sink), the epoch table, the run's clock and, at the end,
summary.json's fields."""
from __future__ import annotations

import sys
import time
from typing import Any

import torch
from omegaconf import DictConfig

from experiments.runformat import metric_keys as keys
from experiments.engine.core import ledger
from experiments.engine.core.flat_grad import parameters_sha256
from experiments.engine.core.replica import Replica
from experiments.engine.core.skip import SkipGuard
from experiments.engine.core.step import StepOutcome
from experiments.engine.core.tasks import Task, describe_task
from experiments.engine.core.world import World
from experiments.engine.rank.report import EpochTable
from experiments.engine.rank.skipped import log_skipped
from experiments.engine.rank.summary import SummaryAccumulator
from experiments.engine.rank.target import TargetWatch


class RunLog:
    """The rank process's record of a run; `session` is experiments/engine/rank/train.py's Session."""

    def __init__(self, cfg: DictConfig, world: World, sink, session) -> None:
        self.cfg, self.world, self.sink, self.session = cfg, world, sink, session
        self.accumulator = SummaryAccumulator(cfg.warmup_steps)
        self.table = EpochTable(enabled=world.hosts_rank_zero, metric=session.task.metric)
        self.table.header(session.method.describe(), session.layout.numel, cfg.workers, world.kind)
        self.started = time.perf_counter()
        self.progress = None  # this epoch's progress bar (start_epoch)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def start_epoch(self, epoch: int, steps: int) -> None:
        """The progress bar of the `steps` this epoch runs (on rank 0's process, if configured)."""
        if self.world.hosts_rank_zero and self.cfg.logger.progress:
            from tqdm import tqdm

            self.progress = tqdm(total=steps, desc=f"epoch {epoch}", file=sys.stderr, mininterval=1.0, leave=False,
                                 dynamic_ncols=True)

    def step(self, outcome: StepOutcome, step: int, epoch: int, lr: float, logging_step: bool,
             guard: SkipGuard | None) -> None:
        """One step: a skipped one is logged as such (and fails the run past the limit); the
        others count in the summary, and a logging step's row goes to the sink."""
        self._record(outcome, step, epoch, lr, logging_step, guard)
        if self.progress is not None:
            self.progress.update(1)

    def _record(self, outcome: StepOutcome, step: int, epoch: int, lr: float, logging_step: bool,
                guard: SkipGuard | None) -> None:
        world, ranks = self.world, self.session.ranks
        if outcome.skipped is not None:  # on_nonfinite=skip: logged, then failed past the limit
            log_skipped(self.sink, self.accumulator, guard, outcome.skipped, world.hosts_rank_zero,
                        {"epoch": epoch, keys.LR: lr, keys.ELAPSED: self.elapsed()})
            return
        metrics = ranks.metrics(outcome.sparsified)
        self.accumulator.add_step(metrics, world.comm.meter.sent)
        if not logging_step:
            return
        metrics.update(ranks.rank_metrics(outcome.sparsified, outcome.step_ms, outcome.losses, outcome.compute_ms))
        metrics.update(ranks.method.metrics())
        metrics[keys.LEDGER] = ledger.encode(world.comm.meter.collectives)
        if outcome.sparsified.positions is not None:  # position_bins > 0
            metrics[keys.POSITIONS] = outcome.sparsified.positions
            metrics[keys.ENERGY] = outcome.sparsified.energy
        metrics["epoch"] = epoch
        metrics[keys.LR] = lr
        metrics[keys.ELAPSED] = self.elapsed()
        if guard is not None:
            metrics[keys.SKIPPED] = 0.0
        self.accumulator.add_logged(step, metrics)
        self.sink.log({"kind": "train", **metrics}, step)
        if self.progress is not None:
            self.progress.set_postfix(loss=f"{metrics[keys.LOSS]:.3f}", refresh=False)

    def evaluate(self, epoch: int, last_step: int, watch: TargetWatch) -> None:
        """Rank 0 evaluates with its own BatchNorm statistics; other ranks go on."""
        session = self.session
        evaluation = evaluate_model(session.task, session.model, session.replicas[0], self.world.device, self.cfg.eval_limit)
        evaluation["epoch"] = epoch
        evaluation[keys.ELAPSED] = self.elapsed()
        self.accumulator.add_eval(evaluation)
        self.accumulator.add_accuracy(last_step, evaluation)
        self.sink.log({"kind": "eval", **evaluation}, last_step)
        watch.saw(evaluation, last_step + 1)

    def end_epoch(self, epoch: int, last_step: int, watch: TargetWatch, evaluated: bool) -> None:
        """The epoch's end: rank 0 evaluates (unless the last step was `evaluated`: a stop at the
        target) and prints the epoch table's row."""
        if self.progress is not None:
            self.progress.close()
            self.progress = None
        if not self.world.hosts_rank_zero:
            return
        if not evaluated:
            self.evaluate(epoch, last_step, watch)
        self.table.row(epoch, self.accumulator.last)

    def summary(self, steps: int, epochs_run: int, guard: SkipGuard | None, stopped: int | None) -> dict[str, Any]:
        """summary.json: the accumulator's reductions and what the run was."""
        cfg, session, world = self.cfg, self.session, self.world
        summary = self.accumulator.summary()
        summary.update(
            steps=steps,
            epochs_run=epochs_run,
            parameters_sha256=parameters_sha256(session.model),
            wall_s=self.elapsed(),
            world=world.kind,
            workers=cfg.workers,
            processes=world.processes,
            **session.ranks.summary_fields(),  # numel, tensor_numels, k_target, sparsifier, the density target
            optimizer={"name": cfg.optimizer.name, "momentum": session.optimizer.param_groups[0].get("momentum")},
            schedule={"name": cfg.schedule.name, **session.schedule.describe()},
            task={**describe_task(session.task), "eval_limit": cfg.eval_limit},
            dataset=session.data.describe(),
        )
        summary[keys.DIVERGED] = self.accumulator.divergence(getattr(session.data, "num_classes", None))
        if guard is not None:
            summary[keys.SKIPPED_STEPS] = guard.total
        if stopped is not None:
            summary["stopped_at_target"] = stopped  # steps done: the first evaluation that reached eval_target
        return summary


def evaluate_model(task: Task, model: torch.nn.Module, replica: Replica, device: torch.device, limit: int | None) -> dict[str, float]:
    """The task's evaluation with rank 0's own BatchNorm statistics, in eval mode."""
    model.eval()
    try:
        with replica.own_buffers(model):
            return task.evaluate(model, device, limit)
    finally:
        model.train()
