"""Each run's task and the data it trained on, and how its headline metric reads.

The runner records, in summary.json, `task` ({kind, metric, higher_is_better}: the headline eval
metric, e.g. eval/perplexity for the LSTM) and `dataset` ({name, task, source, ...}: `source` is
`real` or `stand-in: <what>`). The runs table carries them as `task`, `task_metric`,
`higher_is_better` and `data_source`; the report, the comparison and the convergence figures
show each run's own metric, labelled and formatted by `experiments.runformat.headline.task_metric`.

Runs from before tasks existed have neither entry: they are classification runs on real data.
A run that does not say (an older run, or one that has not written its summary yet: killed,
failed, still running) gets the task whose headline metric its eval rows hold (`infer_metric`),
else classification.
"""
from __future__ import annotations

import math
import re
from typing import Any, Iterable

from analysis.columns import ACCURACY
from experiments.runformat import metric_keys as keys
from experiments.runformat.headline import Headline, task_metric

# The task of runs that do not record one (older runs): the runner only trained classifiers then.
DEFAULT_KIND = "classification"
DEFAULT_METRIC = ACCURACY
REAL = "real"
STAND_IN = "stand-in"
UNKNOWN_STAND_IN = "stand-in: possibly (no summary.json, and dataset.if_missing=stand_in allowed one)"

# Headline metric -> task kind, in the order eval columns are searched when a run does not say.
KINDS = {keys.ACCURACY: "classification", keys.PERPLEXITY: "language_model", keys.HR10: "recommendation"}


# How an eval metric reads (label, format, direction) lives in the headline registry, with every
# other reported number; these names are the ones the analysis has always used.


def metric_order(metrics: Iterable[Any]) -> list[str]:
    """The distinct task metrics in `metrics` (a column), in order of first appearance."""
    seen: dict[str, None] = {}
    for metric in metrics:
        if isinstance(metric, str) and metric:
            seen.setdefault(metric)
    return list(seen)


def kind_of(metric: str) -> str:
    """The task kind whose headline metric is `metric` (eval/hr20 too: a recommendation)."""
    if metric in KINDS:
        return KINDS[metric]
    return "recommendation" if re.match(r"eval/hr\d+$", str(metric)) else DEFAULT_KIND


def infer_metric(eval_columns: Iterable[str]) -> str | None:
    """The headline metric among a run's eval columns (the first of KINDS present, else a hit
    rate at another cut-off), or None."""
    present = set(eval_columns)
    for metric in KINDS:
        if metric in present:
            return metric
    hit_rates = sorted(column for column in present if kind_of(column) == "recommendation")
    return hit_rates[0] if hit_rates else None


def describe_task(summary: dict[str, Any]) -> dict[str, Any]:
    """The runs-table columns of a run's task and data, from its summary.json; None where the
    summary does not say (no summary yet, or an older run): `fill_task` completes them."""
    task = summary.get("task") if isinstance(summary.get("task"), dict) else {}
    dataset = summary.get("dataset") if isinstance(summary.get("dataset"), dict) else {}
    metric = task.get("metric")
    # A summary without `dataset` is an older run's: those trained on the real data only.
    source = dataset.get("source") or (REAL if summary else None)
    if not metric:
        return {"task": None, "task_metric": None, "higher_is_better": None, "data_source": source}
    direction = task.get("higher_is_better")
    return {
        "task": task.get("kind") or dataset.get("task") or kind_of(metric),
        "task_metric": metric,
        "higher_is_better": task_metric(metric).higher_is_better if direction is None else bool(direction),
        "data_source": source,
    }


def fill_task(row: dict[str, Any], eval_columns: Iterable[str]) -> None:
    """Completes, in place, the task columns that a run's summary did not give (runs-table row
    `row`, its eval rows' columns): the metric is the headline metric its eval rows or summary
    hold (older runs: accuracy), else accuracy; the data is real unless the run has no summary
    and its config let a stand-in replace missing data (flagged as possible: only the summary
    would have said)."""
    if not row.get("task_metric"):
        logged = set(eval_columns) | {key for key in row if str(key).startswith(keys.EVAL_PREFIX)}
        metric = infer_metric(logged) or DEFAULT_METRIC
        row.update(task=kind_of(metric), task_metric=metric, higher_is_better=task_metric(metric).higher_is_better)
    if not row.get("data_source"):
        row["data_source"] = UNKNOWN_STAND_IN if row.get("cfg.dataset.if_missing") == "stand_in" else REAL


def is_stand_in(source: Any) -> bool:
    """True for a `stand-in: ...` data source."""
    return isinstance(source, str) and source.startswith(STAND_IN)


def stand_in_what(source: str) -> str:
    """"stand-in: synthetic images" -> "synthetic images"."""
    return source[len(STAND_IN):].lstrip(" :") or "unnamed"


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
