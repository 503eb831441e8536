"""The numbers of the report: one row per run from its logged rows, then mean and std over the
seeds of runs that differ in nothing else.

Per run, the one reduction rule of experiments/runformat/headline.py (the registry summary.json and the
terminal summary use too), from metrics.jsonl, so the numbers exist for unfinished runs and for
W&B runs too: timings are medians over logged train steps at or after warmup_steps (all logged
steps when none is that late); traffic, density, build-up, load imbalance are means over logged
steps; the settled density error is the mean over the later half of the rows that hold one; the
run's task metric (`task_metric`: eval/accuracy, eval/perplexity, eval/hr10, ...) is its last
evaluation (largest step, then epoch), as `metric`, NaN when that evaluation is not finite.

Groups (`summarize`): runs that differ only in their seed (analysis.settings decides which
config keys count); the keys that tell groups apart are `cfg.<key>` columns of the summary.
"""
from __future__ import annotations

import math
import statistics
from typing import Sequence

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

from analysis import columns as c
from analysis.settings import as_text, differing_keys, setting_columns
from analysis.tables import RunTables
from experiments.runformat import metric_keys as keys
from experiments.runformat.headline import HEADLINES, Headline, reduce_logged

# stat -> headline: the registry's numbers the report has a column for (scaled: MB, not bytes).
STATS: dict[str, Headline] = {spec.stat: spec for spec in HEADLINES.values() if spec.stat}
# task_metric: runs of different tasks are never averaged together; data_source: nor runs on
# stand-in data with runs on the real data. Config differences beyond these: analysis.settings.
GROUP = ["method", "density", "workers", "world", "model", "dataset", "task_metric", "data_source"]
RUN_KEYS = ["run_id", "sparsifier", *GROUP, "seed", "status", "settings"]
CONFIDENCE = 0.95


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float | None, float | None]:
    """The mean of `values` (one per seed) and its Student-t interval, mean +- t((1 + confidence)
    / 2, n - 1) s / sqrt(n); one value has no spread: (mean, None, None)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None, None
    half = float(student_t.ppf(0.5 + confidence / 2, len(values) - 1)) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def run_stats(tables: RunTables) -> pd.DataFrame:
    """One row per run (every status): RUN_KEYS, `metric` (the last evaluation of the run's
    `task_metric`), the STATS columns, `skipped_steps` (on_nonfinite=skip) and the config
    columns that can tell runs apart (analysis.settings)."""
    runs = tables.runs
    stats = runs[RUN_KEYS + setting_columns(runs)].copy().set_index("run_id")
    steps = tables.steps
    order = logged_order(steps)
    late = steps["after_warmup"].to_numpy(dtype=bool) if "after_warmup" in steps.columns else None
    for name, spec in STATS.items():
        if not c.has_data(steps, spec.logged_key):
            stats[name] = np.nan
            continue
        values = pd.to_numeric(steps[spec.logged_key], errors="coerce").to_numpy(dtype=float)
        stats[name] = pd.Series({
            run: reduce_logged(spec.reduce, values[rows], None if late is None else late[rows]) * spec.scale
            for run, rows in order.items()
        }, dtype=float)
    stats["metric"] = _last_task_metric(tables.epochs)
    stats["skipped_steps"] = _skipped_steps(runs, steps)
    return stats.reset_index()


def logged_order(steps: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per run, the positions of its train rows in step order (the order they were logged)."""
    if steps.empty or "run_id" not in steps.columns:
        return {}
    step = steps["step"].to_numpy()
    groups = steps.groupby("run_id", observed=True, sort=False).indices
    return {run: rows[np.argsort(step[rows], kind="stable")] for run, rows in groups.items()}


def _skipped_steps(runs: pd.DataFrame, steps: pd.DataFrame) -> pd.Series:
    """Steps skipped by on_nonfinite=skip: summary.json's count, else the skipped rows logged
    (an unfinished run has no summary yet)."""
    logged = pd.Series(dtype=float)
    if c.has_data(steps, keys.SKIPPED):
        logged = (pd.to_numeric(steps[keys.SKIPPED], errors="coerce") == 1).groupby(steps["run_id"], observed=True).sum()
    counted = runs.set_index("run_id")[keys.SKIPPED_STEPS] if keys.SKIPPED_STEPS in runs.columns else pd.Series(dtype=float)
    combined = pd.to_numeric(counted, errors="coerce").reindex(runs["run_id"])
    return combined.fillna(logged.reindex(runs["run_id"])).fillna(0).astype(float)


def timing_rows(steps: pd.DataFrame) -> pd.Series:
    """Mask of the rows timing statistics use: post-warm-up rows, or every row of a run that
    never got past its warm-up (a short or killed run still gets a number)."""
    late = steps["after_warmup"].astype(bool)
    has_late = late.groupby(steps["run_id"], observed=True).transform("any").astype(bool)
    return late | ~has_late


def _last_task_metric(epochs: pd.DataFrame) -> pd.Series:
    """Per run, its own task metric at its last evaluation: NaN when that one is missing or not
    finite (never an earlier evaluation's value; nonfinite_reasons flags such a run)."""
    parts = []
    for metric in epochs["task_metric"].dropna().unique() if "task_metric" in epochs.columns else ():
        if c.has_data(epochs, metric):
            rows = epochs[epochs["task_metric"] == metric].sort_values(["step", "epoch"], kind="stable")
            last = rows.drop_duplicates("run_id", keep="last").set_index("run_id")[metric]
            values = pd.to_numeric(last, errors="coerce").astype(float)
            parts.append(values.where(np.isfinite(values)))
    return pd.concat(parts) if parts else pd.Series(dtype=float)


def summarize(stats: pd.DataFrame, names: list[str] | None = None) -> pd.DataFrame:
    """Mean and std over seeds of the runs that differ only in their seed: each GROUP (method,
    density, workers, world, model, dataset, task metric, data source) and, within it, each
    combination of the config keys that differ among `stats` (analysis.settings).

    Columns: GROUP, the differing keys (`cfg.<key>`, as the config writes them), `status` when
    runs of several statuses are summarized, `runs`, `seeds`, and `<stat>` (mean) and
    `<stat>_std` (NaN for one seed).
    """
    names = names or ["metric", *STATS]
    varying = differing_keys(stats)
    # Unfinished runs (--include-unfinished) get rows of their own, never averaged with done ones.
    status = ["status"] if stats["status"].nunique() > 1 else []
    keyed = stats.assign(**{column: as_text(stats[column]) for column in varying})
    grouped = keyed.groupby(GROUP + varying + status, dropna=False, observed=True, sort=True)
    summary = grouped[names].mean()
    spread = grouped[names].std(ddof=1).add_suffix("_std")
    counts = grouped.agg(runs=("run_id", "size"), seeds=("seed", "nunique"))
    return pd.concat([counts, summary, spread], axis=1).reset_index()


def nonfinite_reasons(runs: pd.DataFrame, stats: pd.DataFrame) -> pd.Series:
    """Per run_id, why its numbers are not to be averaged although it may have finished ("" when
    they are fine): steps skipped by on_nonfinite=skip, or a last evaluation whose task metric is
    not finite. (Other non-finite values cannot reach the numbers: they are read as missing.)"""
    evaluated = runs.set_index("run_id")["eval_rows"] if "eval_rows" in runs.columns else pd.Series(dtype=float)
    reasons = {}
    for row in stats.itertuples(index=False):
        row = row._asdict()
        parts = []
        if row.get("skipped_steps", 0) > 0:
            parts.append(f"{int(row['skipped_steps'])} step(s) skipped (on_nonfinite=skip)")
        if evaluated.get(row["run_id"], 0) > 0 and np.isnan(row.get("metric", np.nan)):
            parts.append(f"last evaluation non-finite ({row['task_metric']})")
        reasons[row["run_id"]] = "; ".join(parts)
    return pd.Series(reasons, dtype=object).reindex(runs["run_id"]).fillna("")
