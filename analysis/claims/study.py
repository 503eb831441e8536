"""A study as the claims read it: its finished runs, the context each belongs to, and the
per-run reductions the claims share (the report's one reduction rule, experiments/headline.py).

Runs are judged together only within a *context*: same model, data, task metric, data source,
world (hosted or distributed) and every other setting that changes what is measured (epochs,
batch size, lr, the machine: analysis.settings), so a fit over W never mixes a one-epoch timing
sweep with a 200-epoch convergence sweep, or two machines. Keys that tell the sweeps of one
study apart without changing what a run measures are pooled (POOLED). Within a context a claim
groups runs by method label (the sparsifier with the knobs that tell its runs apart), density
and W, and averages over seeds as the report does.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.labels import format_knob
from analysis.settings import as_text, differing_keys, key_title
from analysis.tables import RunTables
from experiments import metric_keys as keys
from experiments.headline import Reduction, reduce_logged

FINISHED = "done"
# Setting keys that may differ within one context: the label of the sweep a run came from, how
# many processes hosted the W ranks (the world column tells hosted from distributed), logging
# frequency and launcher plumbing. Prefixes end in ".".
POOLED = ("cfg.tag", "cfg.processes", "cfg.logger.log_every", "cfg.launcher.")
# Where the context label comes from when these vary across the study.
CONTEXT_COLUMNS = ("world", "task_metric", "data_source")

# A run's "settled" rows: the later half of its logged rows that hold the value (the report's
# settled density error, Reduction.MEAN_LATER_HALF), counted only when that half has at least
# SETTLED_MIN_ROWS rows and starts at or after step SETTLED_FROM_STEP. Why 200: MiCRO's and
# ExDyna's threshold rule moves lambda by at most 0.5% a step, so a threshold that starts a
# factor e away from its settled value needs ln(e) / ln(1.005) = 200 steps to get there; the
# papers show the error settling "after a few hundred steps". 20 rows keep the mean from resting
# on a handful of logged steps.
SETTLED_MIN_ROWS = 20
SETTLED_FROM_STEP = 200


def _pooled(column: str) -> bool:
    return any(column.startswith(p) if p.endswith(".") else column == p for p in POOLED)


def context_labels(runs: pd.DataFrame) -> pd.Series:
    """Per run, its context: "model/dataset" plus every setting that varies across `runs` and is
    not pooled ("mlp/synthetic epochs=4"). The label is the context's key."""
    if runs.empty:
        return pd.Series(dtype=object, index=runs.index)
    label = runs["model"].map(format_knob) + "/" + runs["dataset"].map(format_knob)
    for column in CONTEXT_COLUMNS:
        if column in runs.columns and runs[column].map(format_knob).nunique() > 1:
            label = label + f" {column}=" + runs[column].map(format_knob)
    for column in differing_keys(runs):
        if not _pooled(column):
            label = label + f" {key_title(column)}=" + as_text(runs[column])
    return label


def subject(method: str, context: str, density: float, workers: int | None = None) -> str:
    """How a measured subject is named in verdicts: "micro | mlp/synthetic | d=0.01 | W=4"."""
    parts = [str(method), str(context), f"d={density:g}"]
    if workers is not None:
        parts.append(f"W={int(workers)}")
    return " | ".join(parts)


@dataclass
class Study:
    """The finished runs of a study (`runs`, with a `context` column), their logged train rows
    (`steps`) and evaluations (`epochs`), and how many runs were left out as unfinished."""

    runs: pd.DataFrame
    steps: pd.DataFrame
    epochs: pd.DataFrame
    left_out: int = 0
    _order: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _cache: dict[tuple, pd.Series | pd.DataFrame] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, tables: RunTables) -> "Study":
        """The study of `tables`: only finished runs are judged (a failed or running run's
        numbers are partial)."""
        runs = tables.runs
        done = runs[runs["status"] == FINISHED].reset_index(drop=True) if "status" in runs.columns else runs.iloc[0:0]
        done = done.assign(context=context_labels(done))
        ids = set(done["run_id"])
        steps = tables.steps[tables.steps["run_id"].isin(ids)] if "run_id" in tables.steps.columns else tables.steps
        epochs = tables.epochs[tables.epochs["run_id"].isin(ids)] if "run_id" in tables.epochs.columns else tables.epochs
        study = cls(runs=done, steps=steps.reset_index(drop=True), epochs=epochs.reset_index(drop=True),
                    left_out=len(runs) - len(done))
        study._order = _logged_order(study.steps)
        return study

    # -- which runs ---------------------------------------------------------------------------
    def runs_of(self, *sparsifiers: str) -> pd.DataFrame:
        """The finished runs of these sparsifiers (every method label of each)."""
        if self.runs.empty:
            return self.runs
        return self.runs[self.runs["sparsifier"].isin(sparsifiers)]

    def has(self, key: str) -> bool:
        """True when some train row logs `key`."""
        return key in self.steps.columns and bool(self.steps[key].notna().any())

    # -- per-run numbers ----------------------------------------------------------------------
    def values(self, run_id: str, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of one run's logged rows that hold `key`, in step order."""
        rows = self._order.get(run_id)
        if rows is None or key not in self.steps.columns:
            return np.empty(0, dtype=float), np.empty(0, dtype=float)
        values = pd.to_numeric(self.steps[key].iloc[rows], errors="coerce").to_numpy(dtype=float)
        steps = self.steps["step"].iloc[rows].to_numpy(dtype=float)
        keep = np.isfinite(values)
        return steps[keep], values[keep]

    def reduced(self, key: str, how: Reduction) -> pd.Series:
        """Per finished run, its logged values of `key` reduced as the report reduces them (NaN
        when it logged none): timings are medians after warm-up, counts means, and so on."""
        cached = self._cache.get(("reduced", key, how))
        if cached is not None:
            return cached
        late = self.steps["after_warmup"].to_numpy(dtype=bool) if "after_warmup" in self.steps.columns else None
        result = {}
        for run_id in self.runs["run_id"]:
            rows = self._order.get(run_id)
            if rows is None or key not in self.steps.columns:
                result[run_id] = float("nan")
                continue
            values = pd.to_numeric(self.steps[key].iloc[rows], errors="coerce").to_numpy(dtype=float)
            result[run_id] = reduce_logged(how, values, None if late is None else late[rows])
        series = pd.Series(result, dtype=float)
        self._cache[("reduced", key, how)] = series
        return series

    def timed(self, key: str) -> pd.Series:
        """Per finished run, the median of timing `key` over its logged steps at or after
        warmup_steps; NaN when none of those logs it (unlike the report, a run that never got
        past its warm-up gives no number: warm-up steps time compilation and caches)."""
        cached = self._cache.get(("timed", key))
        if cached is not None:
            return cached
        late = self.steps["after_warmup"].to_numpy(dtype=bool) if "after_warmup" in self.steps.columns else None
        result = {}
        for run_id in self.runs["run_id"]:
            rows = self._order.get(run_id)
            if rows is None or late is None or key not in self.steps.columns:
                result[run_id] = float("nan")
                continue
            values = pd.to_numeric(self.steps[key].iloc[rows], errors="coerce").to_numpy(dtype=float)
            values = values[late[rows] & np.isfinite(values)]
            result[run_id] = float(np.median(values)) if values.size else float("nan")
        series = pd.Series(result, dtype=float)
        self._cache[("timed", key)] = series
        return series

    def settled(self, key: str) -> pd.DataFrame:
        """Per finished run: `value`, the mean of `key` over its settled rows (the later half of
        the logged rows that hold it), `rows` (how many), `from_step` (the first of them) and
        `ok` (the half is long and late enough: SETTLED_MIN_ROWS, SETTLED_FROM_STEP)."""
        records = {}
        for run_id in self.runs["run_id"]:
            steps, values = self.values(run_id, key)
            later = slice(len(values) // 2, None)  # the last ceil(m/2) rows, as MEAN_LATER_HALF
            count = len(values[later])
            first = float(steps[later][0]) if count else float("nan")
            records[run_id] = {
                "value": float(np.mean(values[later])) if count else float("nan"),
                "rows": count,
                "from_step": first,
                "ok": count >= SETTLED_MIN_ROWS and first >= SETTLED_FROM_STEP,
            }
        return pd.DataFrame.from_dict(records, orient="index", columns=["value", "rows", "from_step", "ok"])

    def final_metric(self) -> pd.Series:
        """Per finished run, its task metric at its last evaluation (by step, then epoch), NaN
        when that one is missing or not finite: never an earlier evaluation's value."""
        result = {}
        for run in self.runs.itertuples(index=False):
            curve = self.curve([run.run_id], run.task_metric)
            result[run.run_id] = float(curve["metric"].iloc[-1]) if len(curve) else float("nan")
        return pd.Series(result, dtype=float)

    def curve(self, run_ids: list[str], metric: str) -> pd.DataFrame:
        """The evaluations of `run_ids` averaged per epoch: columns epoch, metric (the mean of
        `metric`, NaN when a run's value there is not finite) and elapsed (mean
        `time/elapsed_s`, NaN when not logged), in epoch order."""
        rows = self.epochs[self.epochs["run_id"].isin(run_ids)] if "run_id" in self.epochs.columns else self.epochs.iloc[0:0]
        if rows.empty or metric not in rows.columns:
            return pd.DataFrame({"epoch": [], "metric": [], "elapsed": []})
        rows = rows.sort_values(["step", "epoch"], kind="stable")
        # The last evaluation of each epoch per run (a resumed run may repeat one).
        rows = rows.drop_duplicates(["run_id", "epoch"], keep="last")
        frame = pd.DataFrame({
            "epoch": rows["epoch"].to_numpy(),
            "metric": pd.to_numeric(rows[metric], errors="coerce").to_numpy(dtype=float),
            "elapsed": pd.to_numeric(rows[keys.ELAPSED], errors="coerce").to_numpy(dtype=float) if keys.ELAPSED in rows.columns else np.nan,
        })
        frame.loc[~np.isfinite(frame["metric"]), "metric"] = np.nan
        # mean with NaN kept: a seed whose evaluation is not finite makes the epoch's mean missing
        return frame.groupby("epoch", sort=True).agg(metric=("metric", lambda v: v.mean(skipna=False)),
                                                     elapsed=("elapsed", "mean")).reset_index()


def _logged_order(steps: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per run, the positions of its train rows in step order."""
    if steps.empty or "run_id" not in steps.columns:
        return {}
    step = steps["step"].to_numpy()
    groups = steps.groupby("run_id", observed=True, sort=False).indices
    return {run: rows[np.argsort(step[rows], kind="stable")] for run, rows in groups.items()}


def method_groups(runs: pd.DataFrame, by_workers: bool = False):
    """(method, context, density[, workers]) -> that group's runs, in sorted order: the unit a
    claim measures (a fit over W, or a comparison at one W)."""
    if runs.empty:
        return []
    keys_ = ["method", "context", "density"] + (["workers"] if by_workers else [])
    return list(runs.groupby(keys_, sort=True, dropna=False))


def per_workers(runs: pd.DataFrame, values: pd.Series) -> pd.Series:
    """W -> the mean over the runs (seeds) at that W of their `values` (run_id -> number); a run
    without a finite value is left out, a W without one is dropped."""
    numbers = values.reindex(runs["run_id"]).to_numpy(dtype=float)
    frame = pd.DataFrame({"workers": runs["workers"].to_numpy(), "value": numbers})
    frame = frame[np.isfinite(frame["value"])]
    return frame.groupby("workers", sort=True)["value"].mean()
