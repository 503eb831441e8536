"""The numbers of the report: one row per run from its logged rows, then mean and std over seeds.

Rules (the same as summary.json's where they overlap, but computed from metrics.jsonl, so they
exist for unfinished runs and for W&B runs too):
- timings: median over logged train steps at or after the run's warmup_steps (all logged steps
  when none is that late);
- traffic, density, build-up, load imbalance: mean over logged train steps;
- the run's task metric (`task_metric`: eval/accuracy, eval/perplexity, eval/hr10, ...): its
  last evaluation (largest step, then epoch), as `metric`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import columns as c
from analysis.tables import RunTables

# stat -> (metric column, "median" over post-warm-up steps | "mean" over all logged steps, scale)
STATS = {
    "select_ms_max": (c.SELECT_MAX, "median", 1.0),
    "select_ms_mean": (c.SELECT_MEAN, "median", 1.0),
    "mb_sent": (c.SENT_MAX, "mean", 1e-6),
    "traffic_ratio": (c.RATIO, "mean", 1.0),
    "density_actual": (c.DENSITY_ACTUAL, "mean", 1.0),
    "density_error": (c.DENSITY_ERROR, "mean", 1.0),
    "abs_density_error": (c.DENSITY_ERROR, "mean_abs", 1.0),
    "buildup": (c.BUILDUP, "mean", 1.0),
    "load_imbalance": (c.LOAD_IMBALANCE, "mean", 1.0),
    "compute_ms": (c.COMPUTE_MAX, "median", 1.0),
    "exchange_ms": (c.EXCHANGE, "median", 1.0),
    "exchange_model_ms": (c.EXCHANGE_MODEL, "median", 1.0),
    "step_ms": (c.STEP, "median", 1.0),
}
# task_metric: runs of different tasks are never averaged together; data_source: nor runs on
# stand-in data with runs on the real data.
GROUP = ["method", "density", "workers", "world", "model", "dataset", "task_metric", "data_source"]
RUN_KEYS = ["run_id", "sparsifier", *GROUP, "seed", "status"]


def run_stats(tables: RunTables) -> pd.DataFrame:
    """One row per run (every status): RUN_KEYS, `metric` (the last evaluation of the run's
    `task_metric`) and the STATS columns."""
    stats = tables.runs[RUN_KEYS].copy().set_index("run_id")
    steps = tables.steps
    for name, (column, how, scale) in STATS.items():
        if not c.has_data(steps, column):
            stats[name] = np.nan
            continue
        values = steps[column].astype(float) * scale
        if how == "mean":
            stats[name] = values.groupby(steps["run_id"], observed=True).mean()
        elif how == "mean_abs":
            stats[name] = values.abs().groupby(steps["run_id"], observed=True).mean()
        else:
            stats[name] = _median_after_warmup(values, steps)
    stats["metric"] = _last_task_metric(tables.epochs)
    return stats.reset_index()


def timing_rows(steps: pd.DataFrame) -> pd.Series:
    """Mask of the rows timing statistics use: post-warm-up rows, or every row of a run that
    never got past its warm-up (a short or killed run still gets a number)."""
    late = steps["after_warmup"].astype(bool)
    has_late = late.groupby(steps["run_id"], observed=True).transform("any").astype(bool)
    return late | ~has_late


def _median_after_warmup(values: pd.Series, steps: pd.DataFrame) -> pd.Series:
    mask = timing_rows(steps)
    return values[mask].groupby(steps["run_id"][mask], observed=True).median()


def _last_task_metric(epochs: pd.DataFrame) -> pd.Series:
    """Per run, the last evaluation of its own task metric."""
    parts = []
    for metric in epochs["task_metric"].dropna().unique() if "task_metric" in epochs.columns else ():
        if c.has_data(epochs, metric):
            rows = epochs[epochs["task_metric"] == metric].dropna(subset=[metric]).sort_values(["step", "epoch"])
            parts.append(rows.groupby("run_id", observed=True)[metric].last())
    return pd.concat(parts) if parts else pd.Series(dtype=float)


def summarize(stats: pd.DataFrame, names: list[str] | None = None) -> pd.DataFrame:
    """Mean and std over seeds of each GROUP (method, density, workers, world, model, dataset,
    task metric, data source).

    Columns: GROUP, `runs`, `seeds`, and `<stat>` (mean) and `<stat>_std` (NaN for one seed).
    """
    names = names or ["metric", *STATS]
    grouped = stats.groupby(GROUP, dropna=False, observed=True, sort=True)
    summary = grouped[names].mean()
    spread = grouped[names].std(ddof=1).add_suffix("_std")
    counts = grouped.agg(runs=("run_id", "size"), seeds=("seed", "nunique"))
    return pd.concat([counts, summary, spread], axis=1).reset_index()
