"""The metric contract (docs/metrics.md): what one step did, as namespaced numbers.

Counts-based metrics (traffic, density, build-up, selection) are known identically on every rank
after the exchange, so they are computed every step without communication. Per-rank timings and
norms are gathered from all ranks on logging steps only, then reduced (max and mean over ranks).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from experiments.runformat import metric_keys as keys
from experiments.engine.core.exchange import ExchangeResult
from experiments.engine.core.traffic import TrafficMeter
from sparsifiers.common.base import SelectionScope
from sparsifiers.common.exchange_kinds import ExchangeKind

# Exchanges whose index all-gather pads every rank to the largest count: load imbalance is the
# padding they pay. The others send one index set (or none), so imbalance is 0 by construction.
PADDED_EXCHANGES = (ExchangeKind.UNION_ALLREDUCE, ExchangeKind.SPARSE_ALLGATHER)

# Columns of the per-rank rows gathered on logging steps.
RANK_STATS = ("loss", "compute_ms", "select_ms", "exchange_ms", "step_ms", "acc_norm", "residual_norm")


@dataclass(frozen=True)
class MetricContext:
    """What the metrics of every step are measured against."""

    numel: int  # N
    k_target: int  # floor(density * N)
    density: float
    scope: SelectionScope
    world_size: int
    dense_bytes: float  # per-rank bytes of the dense allreduce of the same model
    dense_model_ms: float | None = None  # the network model's time for that dense allreduce
    exchange: ExchangeKind = ExchangeKind.UNION_ALLREDUCE


def exchange_metrics(
    result: ExchangeResult, meter: TrafficMeter, context: MetricContext, k_now: int | None = None,
    density_now: float | None = None,
) -> dict[str, float]:
    """Traffic, density, build-up and selection shape of one exchange. `k_now`/`density_now`:
    the method's current target when it changes during the run (DGC's warm-up stages)."""
    k_target = k_now or context.k_target
    density_target = density_now or context.density
    counts = result.counts.double()
    union = float(result.aggregated)
    # A low-rank exchange (PowerSGD) selects no coordinates: its counts are the elements each
    # rank sent (k/max, k/mean), and, as with dense, every rank contributes to all N coordinates
    # of the aggregate, so build-up and overlap are measured against N per rank (1 and W).
    chosen = torch.full_like(counts, float(context.numel)) if context.exchange is ExchangeKind.LOW_RANK else counts
    total = float(chosen.sum())
    mean_count = total / context.world_size
    # Build-up is what the selections brought, |U| - |C|: coordinates every rank adds unexchanged
    # (C, DEFT's common units) are in no S_r and are no build-up. density/* keep all of |U|.
    selected = union - result.shared
    if context.scope is SelectionScope.WHOLE:
        buildup = selected / mean_count if mean_count else float("nan")
    else:  # split: the distinct selectors' selections together should be exactly their union
        buildup = selected / total if total else float("nan")
    modelled = {}
    if meter.network is not None:
        modelled = {keys.EXCHANGE_MODEL: meter.model_s * 1e3, keys.DENSE_MODEL: context.dense_model_ms}
    return {
        **modelled,
        keys.SENT_MAX: float(meter.sent.max()),
        keys.SENT_MEAN: float(meter.sent.mean()),
        keys.RECV_MAX: float(meter.recv.max()),
        keys.RECV_MEAN: float(meter.recv.mean()),
        keys.DENSE_BYTES: context.dense_bytes,
        keys.RATIO: float(meter.sent.mean()) / context.dense_bytes if context.dense_bytes else float("nan"),
        keys.DENSITY_ACTUAL: union / context.numel,
        keys.DENSITY_TARGET: density_target,
        keys.DENSITY_ERROR: union / k_target - 1.0,
        keys.BUILDUP: buildup,
        keys.OVERLAP: total / selected if selected else float("nan"),  # shared (common) units excluded
        keys.K_MAX: float(counts.max()),
        keys.K_MEAN: float(counts.sum()) / context.world_size,
        keys.LOAD_IMBALANCE: (
            context.world_size * float(counts.max()) / total - 1.0 if total and context.exchange in PADDED_EXCHANGES else 0.0
        ),
    }


def rank_metrics(stats: torch.Tensor) -> dict[str, float]:
    """Reduces the gathered [W, len(RANK_STATS)] rows: max and mean over ranks."""
    column = {name: stats[:, i].double() for i, name in enumerate(RANK_STATS)}
    metrics = {
        keys.LOSS: float(column["loss"].mean()),
        keys.SELECT_MAX: float(column["select_ms"].max()),
        keys.SELECT_MEAN: float(column["select_ms"].mean()),
        keys.COMPUTE_MAX: float(column["compute_ms"].max()),
        keys.COMPUTE_MEAN: float(column["compute_ms"].mean()),
        keys.EXCHANGE: float(column["exchange_ms"].max()),
        keys.STEP: float(column["step_ms"].max()),
    }
    if not torch.isnan(column["acc_norm"]).any():
        metrics[keys.RESIDUAL] = float(column["residual_norm"].mean())
        ratio = column["residual_norm"] / column["acc_norm"].clamp_min(1e-30)
        metrics[keys.REL_RESIDUAL] = float(ratio.mean())
    return metrics
