"""One rank's hook state, built from plain Python: torch's pattern for DDP communication hooks.

    state = SparsifierState(ddp_model, "deft", density=0.01)
    ddp_model.register_comm_hook(state, sparsifier_hook)

as torch's own `PowerSGDState` and `powerSGD_hook` are used. The state holds what the hook keeps
between steps: the method's sparsifier, the flat gradient and the error-feedback residual, the
bucket assembly (buckets.py), the step counter, and the last step's stats. Each iteration, DDP's
buckets are assembled into the whole gradient; when the last one arrives, the state runs phases
1 to 5 of the runner's step (docs/architecture.md, "One step") with the production code, the
runner's `HostedRanks` (experiments/engine/core/hosted.py): the accumulate rule, `sparsify_and_exchange`
(plan, select, exchange, residual, observe) and the metrics, over a world of one rank per
process, so selections, aggregates, residuals and the metered traffic are the ones `run.py`
would compute on the same gradients. DDP then writes the aggregate (the mean over
ranks, on the exchanged coordinates only) into every `param.grad`, and the user's optimizer steps
on it as usual.

The whole exchange runs inside the last bucket's hook: a model-wide selection needs the whole
gradient, so nothing of it overlaps backward (the methods' papers do not overlap it either).

Nothing here reads conf/ or imports Hydra, the launcher or the rank process: an installed wheel
runs it (methods.py resolves a method name to its class).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from experiments.runformat import metric_keys as keys
from experiments.engine.core.collectives import RankCollectives
from experiments.engine.core.finite import NonFiniteValue, check_accumulator, check_aggregate
from experiments.engine.core.hosted import HostedRanks
from experiments.engine.core.sparsify import SparsifyOutcome
from experiments.engine.core.world import World
from experiments.engine.ddp.buckets import BucketAssembly
from experiments.engine.ddp.checks import check_model, check_optimizer, check_same_on_every_rank, check_settings
from experiments.engine.ddp.methods import Method, resolve
from experiments.runformat.errors import ConfigError, require
from sparsifiers.common.base import Sparsifier
from sparsifiers.common.kernels import set_backend, warm_up
from sparsifiers.common.layout import Layout

STATE_FORMAT = 1  # bump when the state_dict's layout changes: an old checkpoint then says so
Stats = dict[str, float]
# A user's script has no optimizer.lr key, and after a failed backward neither DDP's reducer nor
# the residual (which already holds the bad gradient) can go on.
HINT = "lower the learning rate or check the data, then restart from your last checkpoint"
# The runner's reductions over ranks (of the per-rank rows, RANK_STATS) a logging step's stats
# carry: the hook runs no forward/backward, so neither loss nor compute time.
OVER_RANKS = (keys.SELECT_MAX, keys.SELECT_MEAN, keys.EXCHANGE, keys.RESIDUAL, keys.REL_RESIDUAL)


class SparsifierState:
    """One rank's sparsifier, error-feedback residual and step counter: the state of
    `sparsifier_hook` (hook.py), as `PowerSGDState` is the state of torch's `powerSGD_hook`.

    `sparsifier` is a method name ("deft", one of `method_names()`) or a `Sparsifier` subclass,
    with `knobs` over its defaults (e.g. density=0.01); the method, its knobs and `seed` must be
    the same on every rank (checked: Random-k's shared draw relies on it); `reduction` is the
    runner's (ring | rank_order: bit-for-bit the runner's sum order); `kernels` the selection
    kernels (auto | torch | compiled, the same results). `optimizer` is checked against the
    method (DGC applies momentum itself, and requires it). `on_stats(stats)` is called after
    every step; every `log_every` steps the stats also hold the norms and the reductions over
    ranks, and go to `wandb_run` if given. Bad input raises ConfigError on every rank, before
    anything is registered. Build it on every rank, after DDP, before training (it all-gathers
    the settings once).

    After each synchronized backward, `stats` holds that step's numbers (keys in
    experiments/runformat/metric_keys.py, docs/metrics.md "The DDP hook") and `outcome` the step's
    selections and exchange result. Save `state_dict()` with your checkpoint on every rank."""

    def __init__(
        self,
        model: DistributedDataParallel,
        sparsifier: str | type[Sparsifier] | Method = "deft",
        *,
        seed: int = 0,
        reduction: str = "ring",
        kernels: str = "auto",
        optimizer: torch.optim.Optimizer | None = None,
        on_stats: Callable[[Stats], None] | None = None,
        wandb_run: Any = None,
        wandb_prefix: str = "sparsebench/",
        log_every: int = 1,
        **knobs: Any,
    ) -> None:
        check_model(model)
        check_settings(reduction, kernels, log_every)
        if isinstance(sparsifier, Method):  # already resolved (register_sparsifier's config node)
            require(not knobs, f"knobs {sorted(knobs)} beside a resolved Method: put them into the Method")
            self.method = sparsifier
        else:
            self.method = resolve(sparsifier, knobs)
        try:  # a rank that refuses alone would leave the others waiting in the gather below
            check_optimizer(self.method, optimizer)
            refused = None
        except ConfigError as error:
            refused = str(error)
        check_same_on_every_rank(self.method, {"seed": seed, "reduction": reduction, "log_every": log_every}, model, refused)
        set_backend(kernels)

        self.module = model.module
        self.layout = Layout.from_module(self.module)
        first = next(p for p in self.module.parameters() if p.requires_grad)
        self.flat = torch.zeros(self.layout.numel, dtype=first.dtype, device=first.device)
        self.world_size, self.rank = dist.get_world_size(), dist.get_rank()
        comm = RankCollectives(self.world_size, [self.rank], use_process_group=True, reduction=reduction)
        self.world = World(self.world_size, self.world_size, self.rank, [self.rank], first.device, comm)
        self.seed = seed
        # This process's one rank, driven as the runner drives its hosted ranks; the aggregate
        # lands in the flat buffer, which the bucket assembly delivers.
        self.ranks = HostedRanks(self.world, [self.method.build(self.layout, self.world_size, self.rank, seed)],
                                 self.flat)
        self.assembly = BucketAssembly(self.module, self.layout, self.flat,
                                       write_all_grads=bool(getattr(model, "find_unused_parameters", False)))
        self.step = 0
        self.stats: Stats = {}
        self.outcome: SparsifyOutcome | None = None
        self.on_stats = on_stats
        self.wandb_run, self.wandb_prefix, self.log_every = wandb_run, wandb_prefix, log_every
        warm_up(self.flat.dtype, self.flat.device)  # compiled now, not inside the first step's timings

    @property
    def sparsifier(self) -> Sparsifier:
        return self.ranks.method

    @property
    def residual(self) -> torch.Tensor:
        """The error-feedback residual (it holds acc between phases 1 and 5)."""
        return self.ranks.residuals[0]

    # -- what the hook does, once per bucket -----------------------------------------------------
    def communicate(self, bucket: dist.GradBucket) -> torch.futures.Future:
        """Collects `bucket`; on the last bucket, exchanges the whole gradient. Returns the
        bucket's future, completed with the aggregate once the last bucket is exchanged."""
        try:
            future = self.assembly.add(bucket)
            if bucket.is_last():
                self.assembly.check_complete()
                buckets, started = self.assembly.buckets, time.perf_counter()
                outcome = self._exchange()
                total_ms = (time.perf_counter() - started) * 1e3
                self.assembly.deliver()
                self.stats = self._stats(outcome, buckets, total_ms, self.assembly.copy_s * 1e3)
                self._report()
        except BaseException as error:
            self.assembly.fail(error)  # DDP raises it from backward instead of waiting forever
            raise
        return future

    def _exchange(self) -> SparsifyOutcome:
        """Phases 1 to 5 of the runner's step on the assembled gradient; the aggregate is left
        in the flat buffer."""
        step = self.step
        self.world.comm.meter.reset()
        gradient = self.ranks.accumulate(0, self.flat)  # residual now holds acc
        self._agree_finite(gradient)
        outcome = self.ranks.step(step, measure_norms=self._logging_step)
        check_aggregate(self.flat, step, HINT)  # the same on every rank: all ranks raise together
        self.outcome = outcome
        self.step += 1
        return outcome

    @property
    def _logging_step(self) -> bool:
        """Norms and the reductions over ranks cost passes and a collective: every log_every steps."""
        return self.step % self.log_every == 0

    def _agree_finite(self, gradient: torch.Tensor) -> None:
        """A non-finite accumulator on any rank fails the step on every rank, before anything is
        exchanged: one flag, all-reduced (bookkeeping, not metered), instead of the other ranks
        waiting for a collective until the process group's timeout."""
        try:
            check_accumulator(self.residual, gradient, self.step, self.rank, HINT)
            error = None
        except NonFiniteValue as found:
            error = found
        flag = torch.tensor([0.0 if error is None else 1.0], device=self.flat.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if error is not None:
            raise error
        if flag.item() > 0:
            raise NonFiniteValue(f"non-finite gradient or residual at step {self.step} on another rank: {HINT}", "gradient")

    def _stats(self, outcome: SparsifyOutcome, buckets: int, total_ms: float, copy_ms: float) -> Stats:
        sparsifier = self.sparsifier
        logging_step = outcome.acc_norms is not None
        stats = {keys.ROW_STEP: float(self.step - 1)}
        stats.update(self.ranks.metrics(outcome))
        stats[keys.HOOK_SELECT] = outcome.select_ms[0]
        stats[keys.HOOK_EXCHANGE] = outcome.exchange_ms
        stats[keys.HOOK_TOTAL] = total_ms
        stats[keys.HOOK_COPY] = copy_ms
        stats[keys.HOOK_BUCKETS] = float(buckets)
        if logging_step:
            acc_norm, residual_norm = outcome.acc_norms[0], outcome.residual_norms[0]
            stats[keys.HOOK_RESIDUAL] = residual_norm
            stats[keys.HOOK_REL_RESIDUAL] = residual_norm / max(acc_norm, 1e-30)
            # Every rank's row, gathered (bookkeeping, not metered) and reduced as the runner
            # reduces them: max for times, mean for norms.
            reduced = self.ranks.rank_metrics(outcome, total_ms)
            stats.update({key: reduced[key] for key in OVER_RANKS})
        # Method state (MiCRO's threshold, ...): the scalars; lists stay in sparsifier.metrics().
        stats.update({key: float(value) for key, value in sparsifier.metrics().items() if isinstance(value, (int, float))})
        return stats

    def _report(self) -> None:
        if self.on_stats is not None:
            self.on_stats(self.stats)
        if self.wandb_run is not None and keys.HOOK_RESIDUAL in self.stats:  # a logging step
            # commit=False: merged into the user's next wandb.log, at the user's own step.
            self.wandb_run.log({self.wandb_prefix + key: value for key, value in self.stats.items()
                                if math.isfinite(value)}, commit=False)

    # -- the training schedule -------------------------------------------------------------------
    def start_epoch(self, epoch: int, steps_per_epoch: int) -> None:
        """Call at the start of every epoch, as the runner does: DGC's warm-up follows epochs."""
        self.sparsifier.start_epoch(epoch, steps_per_epoch)

    def set_learning_rate(self, lr: float) -> None:
        """Call before every step with the optimizer's learning rate, as the runner does:
        Accordion's detection compares it with the previous detection's. Not called, that rule
        is off (the other methods ignore it)."""
        self.sparsifier.set_learning_rate(lr)

    # -- exact resume -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """This rank's hook state: save it beside the model and optimizer, on every rank."""
        return {
            "format": STATE_FORMAT,
            "method": self.sparsifier.name,
            "numel": self.layout.numel,
            "world_size": self.world_size,
            "rank": self.rank,
            "step": self.step,
            "knobs": dict(self.method.knobs),
            "seed": self.seed,
            "residual": self.residual.detach().cpu().clone(),
            "sparsifier": self.sparsifier.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores `state_dict()` of the same method, knobs, seed, model size, world size and rank."""
        require(state.get("format") == STATE_FORMAT,
                f"hook state has format {state.get('format')}, this version reads {STATE_FORMAT}: "
                "it was saved by another version of sparsebench")
        expected = {"method": self.sparsifier.name, "numel": self.layout.numel,
                    "world_size": self.world_size, "rank": self.rank, "seed": self.seed}
        for key, value in expected.items():
            require(state[key] == value, f"hook state has {key}={state[key]}, this hook has {key}={value}: "
                    "load each rank's own state into the same method, seed, model and world")
        for key, value in self.method.knobs.items():  # a resumed run goes on with the same knobs
            saved = state["knobs"].get(key)
            require(saved == value, f"hook state has sparsifier.{key}={saved}, this hook has sparsifier.{key}={value}: "
                    "register the hook with the knobs the checkpoint was saved with")
        self.residual.copy_(state["residual"].to(self.residual.device))
        self.sparsifier.load_state_dict(state["sparsifier"])
        self.step = int(state["step"])
