"""A study as the claims read it: its finished runs, the context each belongs to, and the
per-run reductions the claims share (the report's one reduction rule, experiments/runformat/headline.py).

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

from analysis.claims.claim import finite
from analysis.divergence import diverged_reasons
from analysis.labels import format_knob
from analysis.settings import as_text, differing_keys, key_title
from analysis.stats import logged_order
from analysis.tables import RunTables
from experiments.runformat import metric_keys as keys
from experiments.runformat.headline import Reduction, reduce_logged

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


def settled_rule(key: str) -> str:
    """The settled rule in words, for a claim's `needs` and `statistic`."""
    return (f"the later half of a run's logged rows holding {key}, counted when it holds "
            f">= {SETTLED_MIN_ROWS} rows from step >= {SETTLED_FROM_STEP}")

# A diverged run's columns (and every sparsifier knob): enough to name it, and for a convergence
# claim to place it beside its method's measured subjects (analysis/claims/diverged.py).
DIVERGED_COLUMNS = ("run_id", "sparsifier", "method", "density", "workers", "seed", "context", "cfg.tag", "why")

# The runs-table columns the claims read (and every sparsifier knob, `cfg.sparsifier.*`).
RUN_COLUMNS = ("run_id", "method", "sparsifier", "density", "workers", "context", "task_metric",
               "higher_is_better", "k_target", "numel", "status", "seed", "cfg.tag")
KNOB_PREFIX = "cfg.sparsifier."


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
    parts = [str(method), str(context), f"d={density:g}" if finite(density) else "d=?"]
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
    # Finished runs that diverged (analysis.divergence): never averaged in. A convergence claim
    # counts its method's against it (analysis/claims/diverged.py); every other claim that reads
    # their method names them as left out. Columns: DIVERGED_COLUMNS and the sparsifier knobs.
    diverged: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=DIVERGED_COLUMNS))
    _read: set[str] = field(default_factory=set, repr=False)  # sparsifiers runs_of was asked for
    _counted: set[str] = field(default_factory=set, repr=False)  # diverged run_ids a claim judged (count_against)
    _order: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _settings: pd.DataFrame | None = field(default=None, repr=False)
    _cache: dict[tuple, pd.Series | pd.DataFrame] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, tables: RunTables) -> "Study":
        """The study of `tables`: only finished runs are judged (a failed or running run's
        numbers are partial)."""
        runs = tables.runs
        done = runs[runs["status"] == FINISHED].reset_index(drop=True) if "status" in runs.columns else runs.iloc[0:0]
        why = done["run_id"].map(diverged_reasons(tables)).fillna("") if len(done) else pd.Series(dtype=object)
        # A diverged run's context is labelled among every finished run: the setting that tells it
        # apart (a larger lr) is named in it.
        diverged = done[why != ""].assign(why=why[why != ""], context=context_labels(done)[why != ""])
        knobs = [c for c in diverged.columns if c.startswith(KNOB_PREFIX)]
        diverged = diverged.reindex(columns=[*DIVERGED_COLUMNS, *knobs]).reset_index(drop=True)
        done = done[why == ""].reset_index(drop=True) if len(done) else done
        settings = done  # every setting column, for the contexts of a claim's own runs (scoped)
        done = done.assign(context=context_labels(done))
        # Only the columns claims read: every filter below copies the rows it keeps.
        done = done[[c for c in done.columns if c in RUN_COLUMNS or c.startswith(KNOB_PREFIX)]]
        # Text as plain Python objects: Arrow-backed columns make every row selection a take().
        done = done.astype({c: object for c in done.columns if not pd.api.types.is_numeric_dtype(done[c])})
        ids = set(done["run_id"])
        steps = tables.steps[tables.steps["run_id"].isin(ids)] if "run_id" in tables.steps.columns else tables.steps
        epochs = tables.epochs[tables.epochs["run_id"].isin(ids)] if "run_id" in tables.epochs.columns else tables.epochs
        epochs = epochs[[c for c in epochs.columns if c in ("run_id", "step", "epoch", keys.ELAPSED) or str(c).startswith(keys.EVAL_PREFIX)]]
        order = [column for column in ("step", "epoch") if column in epochs.columns]
        if order:  # a study may hold no evaluation at all (the selection study trains nothing)
            epochs = epochs.sort_values(order, kind="stable")
        study = cls(runs=done, steps=steps.reset_index(drop=True), epochs=epochs.reset_index(drop=True),
                    left_out=len(runs) - len(done) - len(diverged), diverged=diverged)
        study._order = logged_order(study.steps)
        study._settings = settings
        return study

    # -- which runs ---------------------------------------------------------------------------
    def scoped(self, experiments: tuple[str, ...]) -> tuple["Study", str]:
        """The runs of the experiments made to measure a claim, and a note that says so: runs
        whose tag is `<scale>/<experiment>` (paper/selection_time, laptop/selection_time) or the
        bare name. When no run carries such a tag (a user's own sweep), the whole study and "".
        Contexts are labelled anew among the chosen runs: a setting that only tells them from the
        rest of the study (the convergence sweep's schedule beside the statistics sweep) would
        lengthen every subject's name without telling two of them apart."""
        if not experiments or self.runs.empty or "cfg.tag" not in self.runs.columns:
            return self, ""
        cached = self._cache.get(("scoped", experiments))
        if cached is None:
            names = self.runs["cfg.tag"].map(lambda tag: str(tag).rsplit("/", 1)[-1])
            chosen = self.runs[names.isin(experiments)]
            if chosen.empty:
                cached = (self, "")
            else:
                ids = set(chosen["run_id"])
                if self._settings is not None:
                    own = self._settings[self._settings["run_id"].isin(ids)]
                    chosen = chosen.assign(context=chosen["run_id"].map(dict(zip(own["run_id"], context_labels(own)))))
                tags = ", ".join(sorted(set(map(str, chosen["cfg.tag"]))))
                tagged = self.diverged["cfg.tag"].map(lambda tag: str(tag).rsplit("/", 1)[-1]).isin(experiments)
                sub = Study(runs=chosen.reset_index(drop=True),
                            steps=self.steps[self.steps["run_id"].isin(ids)].reset_index(drop=True),
                            epochs=self.epochs[self.epochs["run_id"].isin(ids)].reset_index(drop=True),
                            left_out=self.left_out, diverged=self.diverged[tagged].reset_index(drop=True))
                sub._order = logged_order(sub.steps)
                cached = (sub, f"judged on the {len(chosen)} runs tagged {tags}")
            self._cache[("scoped", experiments)] = cached
        return cached

    def runs_of(self, *sparsifiers: str) -> pd.DataFrame:
        """The finished runs of these sparsifiers (every method label of each), diverged ones
        left out; the sparsifiers are noted (diverged_read)."""
        self._read.update(sparsifiers)
        if self.runs.empty:
            return self.runs
        cached = self._cache.get(("runs_of", sparsifiers))
        if cached is None:
            cached = self.runs[self.runs["sparsifier"].isin(sparsifiers)]
            self._cache[("runs_of", sparsifiers)] = cached
        return cached

    def start_reading(self) -> None:
        """Forget which sparsifiers were read and which diverged runs were counted: a claim's
        measure starts (analysis.claims.judge)."""
        self._read, self._counted = set(), set()

    def diverged_of(self, *sparsifiers: str) -> pd.DataFrame:
        """The diverged runs of these sparsifiers (DIVERGED_COLUMNS and their knobs)."""
        return self.diverged[self.diverged["sparsifier"].isin(sparsifiers)]

    def count_against(self, run_ids) -> None:
        """These diverged runs were judged (as failing subjects of a convergence claim): they
        are in the claim's numbers, so diverged_read no longer names them as left out."""
        self._counted.update(run_ids)

    def diverged_read(self) -> list[str]:
        """The diverged runs of the sparsifiers read since start_reading, one line each
        ("micro W=4 seed 0: diverged at step 5: ..."): left out of what the claim measured
        (those it counted against itself are in its numbers instead)."""
        rows = self.diverged[self.diverged["sparsifier"].isin(self._read) & ~self.diverged["run_id"].isin(self._counted)]
        return [f"{row.method} W={format_knob(row.workers)} seed {format_knob(row.seed)}: {row.why}"
                for row in rows.itertuples(index=False)]

    def has(self, key: str) -> bool:
        """True when some train row logs `key`."""
        return key in self.steps.columns and bool(self.steps[key].notna().any())

    # -- per-run numbers ----------------------------------------------------------------------
    def column(self, key: str) -> np.ndarray | None:
        """Train rows' `key` as floats (NaN where missing or not a number), None when no row
        has the column; converted once per key."""
        if key not in self.steps.columns:
            return None
        cached = self._cache.get(("column", key))
        if cached is None:
            cached = pd.to_numeric(self.steps[key], errors="coerce").to_numpy(dtype=float)
            self._cache[("column", key)] = cached
        return cached

    def train_rows(self, run_id: str) -> pd.DataFrame:
        """One run's logged train rows, in step order."""
        rows = self._order.get(run_id)
        return self.steps.iloc[rows] if rows is not None else self.steps.iloc[0:0]

    def values(self, run_id: str, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of one run's logged rows that hold `key`, in step order."""
        rows, column, steps = self._order.get(run_id), self.column(key), self.column("step")
        if rows is None or column is None:
            return np.empty(0, dtype=float), np.empty(0, dtype=float)
        values = column[rows]
        keep = np.isfinite(values)
        return steps[rows][keep], values[keep]

    def reduced(self, key: str, how: Reduction) -> pd.Series:
        """Per finished run, its logged values of `key` reduced as the report reduces them (NaN
        when it logged none): timings are medians after warm-up, counts means, and so on."""
        return self._per_run(("reduced", key, how), key,
                             lambda values, late: reduce_logged(how, values, late), needs_warmup=False)

    def timed(self, key: str) -> pd.Series:
        """Per finished run, the median of timing `key` over its logged steps at or after
        warmup_steps; NaN when none of those logs it (unlike the report, a run that never got
        past its warm-up gives no number: warm-up steps time compilation and caches)."""
        def median_after_warmup(values: np.ndarray, late: np.ndarray) -> float:
            values = values[late & np.isfinite(values)]
            return float(np.median(values)) if values.size else float("nan")

        return self._per_run(("timed", key), key, median_after_warmup, needs_warmup=True)

    def _per_run(self, cache_key: tuple, key: str, reduce, needs_warmup: bool) -> pd.Series:
        """One number per finished run: `reduce(its logged values of key in step order, their
        after-warm-up mask)` (the mask is None when the steps table has none and the reduction
        does not need it); NaN for a run that logged none. Cached per `cache_key`."""
        cached = self._cache.get(cache_key)
        if cached is not None:
            return cached
        late = self.steps["after_warmup"].to_numpy(dtype=bool) if "after_warmup" in self.steps.columns else None
        column, result = self.column(key), {}
        for run_id in self.runs["run_id"]:
            rows = self._order.get(run_id)
            if rows is None or column is None or (needs_warmup and late is None):
                result[run_id] = float("nan")
                continue
            result[run_id] = reduce(column[rows], None if late is None else late[rows])
        series = pd.Series(result, dtype=float)
        self._cache[cache_key] = series
        return series

    def settled(self, key: str) -> pd.DataFrame:
        """Per finished run: `value`, the mean of `key` over its settled rows (the later half of
        the logged rows that hold it), `rows` (how many), `from_step` (the first of them) and
        `ok` (the half is long and late enough: SETTLED_MIN_ROWS, SETTLED_FROM_STEP)."""
        cached = self._cache.get(("settled", key))
        if cached is not None:
            return cached
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
        frame = pd.DataFrame.from_dict(records, orient="index", columns=["value", "rows", "from_step", "ok"])
        self._cache[("settled", key)] = frame
        return frame

    def final_metric(self) -> pd.Series:
        """Per finished run, its task metric at its last evaluation (by step, then epoch), NaN
        when that one is missing or not finite: never an earlier evaluation's value."""
        cached = self._cache.get(("final",))
        if cached is not None:
            return cached
        result = pd.Series(np.nan, index=pd.Index(self.runs["run_id"]), dtype=float)
        if not self.epochs.empty and "run_id" in self.epochs.columns:
            last = self.epochs.sort_values(["step", "epoch"], kind="stable").drop_duplicates("run_id", keep="last")
            metric_of = self.runs.set_index("run_id")["task_metric"]
            for row in last.itertuples(index=False):
                metric = metric_of.get(row.run_id)
                position = last.columns.get_loc(metric) if metric in last.columns else None
                value = pd.to_numeric(pd.Series([row[position]]), errors="coerce").iloc[0] if position is not None else np.nan
                result[row.run_id] = float(value) if np.isfinite(value) else np.nan
        self._cache[("final",)] = result
        return result

    def curve(self, run_ids: list[str], metric: str) -> pd.DataFrame:
        """The evaluations of `run_ids` averaged per epoch: columns epoch, metric (the mean of
        `metric`; NaN when any run's value there is not finite: a diverged seed is not averaged
        away) and elapsed (mean `time/elapsed_s` of the runs that log it, else NaN), in epoch
        order."""
        per_epoch: dict[int, list[tuple[float, float]]] = {}
        for run_id in run_ids:
            for epoch, pair in self._evaluations(run_id, metric).items():
                per_epoch.setdefault(epoch, []).append(pair)
        records = []
        for epoch in sorted(per_epoch):
            metrics = np.array([m for m, _ in per_epoch[epoch]])
            elapsed = np.array([e for _, e in per_epoch[epoch]])
            elapsed = elapsed[np.isfinite(elapsed)]
            records.append((epoch, float(metrics.mean()) if np.isfinite(metrics).all() else np.nan,
                            float(elapsed.mean()) if elapsed.size else np.nan))
        return pd.DataFrame.from_records(records, columns=["epoch", "metric", "elapsed"])

    def _evaluations(self, run_id: str, metric: str) -> dict[int, tuple[float, float]]:
        """One run's epoch -> (`metric`, `time/elapsed_s`) of its last evaluation of that epoch (a
        resumed run may repeat one); non-finite values as NaN."""
        cache_key = ("evaluations", run_id, metric)
        cached = self._cache.get(cache_key)
        if cached is not None:
            return cached
        if "eval_rows" not in self._cache:
            self._cache["eval_rows"] = self.epochs.groupby("run_id", observed=True, sort=False).indices \
                if "run_id" in self.epochs.columns and len(self.epochs) else {}
        rows = self._cache["eval_rows"].get(run_id)
        result: dict[int, tuple[float, float]] = {}
        if rows is not None and metric in self.epochs.columns:
            part = self.epochs.iloc[rows]  # already in (step, epoch) order: later rows win
            values = pd.to_numeric(part[metric], errors="coerce").to_numpy(dtype=float)
            elapsed = pd.to_numeric(part[keys.ELAPSED], errors="coerce").to_numpy(dtype=float) \
                if keys.ELAPSED in part.columns else np.full(len(part), np.nan)
            for epoch, value, seconds in zip(part["epoch"].to_numpy(), values, elapsed):
                result[int(epoch)] = (value if np.isfinite(value) else np.nan, seconds if np.isfinite(seconds) else np.nan)
        self._cache[cache_key] = result
        return result


def method_groups(runs: pd.DataFrame, by_workers: bool = False) -> list[tuple[tuple, pd.DataFrame]]:
    """(method, context, density[, workers]) -> that group's runs, in sorted order: the unit a
    claim measures (a fit over W, or a comparison at one W). Grouped in Python: pandas' groupby
    costs more than the handful of runs a claim reads."""
    if runs.empty:
        return []
    columns = ["method", "context", "density"] + (["workers"] if by_workers else [])
    positions: dict[tuple, list[int]] = {}
    for position, key in enumerate(zip(*(runs[column].tolist() for column in columns))):
        key = tuple(None if isinstance(part, float) and part != part else part for part in key)  # NaN never equals itself
        positions.setdefault(key, []).append(position)
    return [(key, runs.iloc[rows]) for key, rows in sorted(positions.items(), key=lambda item: _sort_key(item[0]))]


def _sort_key(key: tuple) -> tuple:
    """Numbers in numeric order (W = 2 before 16), text after, a missing value last."""
    return tuple((0, float(part), "") if finite(part) else (1, 0.0, str(part)) for part in key)


def per_workers(runs: pd.DataFrame, values: pd.Series) -> pd.Series:
    """W -> the mean over the runs (seeds) at that W of their `values` (run_id -> number); a run
    without a finite value is left out, a W without one is dropped."""
    numbers = values.reindex(runs["run_id"]).to_numpy(dtype=float)
    frame = pd.DataFrame({"workers": runs["workers"].to_numpy(), "value": numbers})
    frame = frame[np.isfinite(frame["value"])]
    return frame.groupby("workers", sort=True)["value"].mean()
