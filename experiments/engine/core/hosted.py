"""The ranks this process hosts, as the sparsification step sees them: one object that every driver
of the hosted step uses (the training loop through `train_step`, the selection replay, the DDP
hook's state, the step benchmark, the tests' stepped ranks).

It owns, per hosted rank, the sparsifier and the error-feedback residual (the one copy of each:
a `Replica` holds only what the model side of a rank needs), and for all of them the aggregate
buffer and the metric context, and offers the step in its parts:

    accumulate(i, grad)   phase 1's accumulate rule for hosted rank i (error_feedback.py)
    step(t, ...)          phases 2 to 5: `sparsify_and_exchange` (sparsify.py)
    metrics(outcome)      the exchange's metrics, against the method's current k and density
    rank_stats(...)       every rank's RANK_STATS row, gathered from every process
    summary_fields()      what summary.json records of the method and the layout
"""
from __future__ import annotations

from typing import Any

import torch

from experiments.runformat import metric_keys as keys
from experiments.engine.core.error_feedback import accumulate
from experiments.engine.core.metrics import RANK_STATS, MetricContext, exchange_metrics, rank_metrics
from experiments.engine.core.phases import NO_CLOCK, PhaseClock
from experiments.engine.core.sparsify import SparsifyOutcome, sparsify_and_exchange
from experiments.engine.core.traffic import dense_allreduce_bytes
from experiments.engine.core.world import World
from sparsifiers.common.base import Sparsifier


class HostedRanks:
    """One sparsifier and one residual per hosted rank (in `world.local_ranks` order), the
    aggregate buffer `out` (the flat gradient buffer in training: the aggregate overwrites
    param.grad) and the metric context."""

    def __init__(self, world: World, sparsifiers: list[Sparsifier], out: torch.Tensor) -> None:
        if len(sparsifiers) != len(world.local_ranks):
            raise ValueError(f"{len(sparsifiers)} sparsifiers for the {len(world.local_ranks)} ranks hosted here")
        self.world = world
        self.sparsifiers = sparsifiers
        self.residuals = [torch.zeros_like(out) for _ in sparsifiers]  # each holds acc during a step
        self.out = out
        self.context = metric_context(world, sparsifiers[0], out)

    @property
    def method(self) -> Sparsifier:
        """The first hosted rank's sparsifier: every rank runs the same method."""
        return self.sparsifiers[0]

    # -- the step ------------------------------------------------------------------------------
    def accumulate(self, index: int, grad: torch.Tensor) -> torch.Tensor:
        """Phase 1 for hosted rank number `index`: its residual becomes acc; returns the
        preconditioned gradient (error_feedback.accumulate)."""
        return accumulate(self.sparsifiers[index], self.residuals[index], grad)

    def step(self, step: int, measure_norms: bool = False, clock: PhaseClock = NO_CLOCK,
             position_bins: int = 0) -> SparsifyOutcome:
        """Phases 2 to 5 on the accumulated residuals; the aggregate lands in `out`."""
        return sparsify_and_exchange(self.world, self.sparsifiers, self.residuals, self.out, step, measure_norms,
                                     clock=clock, position_bins=position_bins)

    # -- what it did -----------------------------------------------------------------------------
    def metrics(self, outcome: SparsifyOutcome) -> dict[str, float]:
        """Traffic, density, build-up and selection of the step (this step's meter), against the
        method's current target (DGC's warm-up stages change it)."""
        method = self.method
        return exchange_metrics(outcome.result, self.world.comm.meter, self.context, method.current_k,
                                method.current_density)

    def rank_stats(self, outcome: SparsifyOutcome, step_ms: float, losses: list[float] | None = None,
                   compute_ms: list[float] | None = None) -> torch.Tensor:
        """Every rank's row in RANK_STATS order, gathered from every process (not counted as
        traffic). Without `losses` or `compute_ms` (no forward/backward) those columns are NaN."""
        nan = float("nan")
        rows = []
        for i in range(len(self.sparsifiers)):
            rows.append([
                losses[i] if losses is not None else nan,
                compute_ms[i] if compute_ms is not None else nan,
                outcome.select_ms[i],
                outcome.exchange_ms,
                step_ms,
                outcome.acc_norms[i] if outcome.acc_norms else nan,
                outcome.residual_norms[i] if outcome.residual_norms else nan,
            ])
        local = torch.tensor(rows, dtype=torch.float64, device=self.world.device)
        assert local.shape[1] == len(RANK_STATS)
        return self.world.comm.gather_stats(local).cpu()

    def rank_metrics(self, outcome: SparsifyOutcome, step_ms: float, losses: list[float] | None = None,
                     compute_ms: list[float] | None = None) -> dict[str, float]:
        """`rank_stats`, reduced over ranks (max and mean: metrics.rank_metrics)."""
        return rank_metrics(self.rank_stats(outcome, step_ms, losses, compute_ms))

    def summary_fields(self) -> dict[str, Any]:
        """What summary.json records of the method and the layout it sparsifies."""
        method = self.method
        return {
            "numel": method.numel,
            "tensor_numels": [segment.numel for segment in method.layout.segments],  # in parameter order
            "k_target": self.context.k_target,
            "sparsifier": method.describe(),
            # The configured target: density/target is, like every headline, the mean of the
            # logged targets (DGC's warm-up stages log their own).
            keys.DENSITY_TARGET_CONFIGURED: method.density,
        }

    # -- saved state (checkpoints, a skipped step) -------------------------------------------------
    def load_rank(self, index: int, residual: torch.Tensor, sparsifier_state: dict[str, Any]) -> None:
        """Puts back hosted rank number `index`'s residual and sparsifier state, in place."""
        self.residuals[index].copy_(residual)
        self.sparsifiers[index].load_state_dict(sparsifier_state)


def metric_context(world: World, method: Sparsifier, out: torch.Tensor) -> MetricContext:
    """What the metrics of every step of `method` over `world` are measured against."""
    numel, element = method.numel, out.element_size()
    network = world.comm.meter.network
    return MetricContext(
        numel=numel,
        k_target=method.k,
        density=method.density,
        scope=method.scope,
        world_size=world.world_size,
        dense_bytes=dense_allreduce_bytes(numel, world.world_size, element),
        dense_model_ms=None if network is None else network.all_reduce_s(world.world_size, numel * element) * 1e3,
        exchange=method.exchange,
    )
