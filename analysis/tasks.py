"""Each run's task and the data it trained on, and how its headline metric reads.

The runner records, in summary.json, `task` ({kind, metric, higher_is_better}: the headline eval
metric, e.g. eval/perplexity for the LSTM) and `dataset` ({name, task, source, ...}: `source` is
`real` or `stand-in: <what>`). The runs table carries them as `task`, `task_metric`,
`higher_is_better` and `data_source`; the report, the comparison and the convergence figures
show each run's own metric, labelled and formatted by `metric_spec`.

Runs from before tasks existed have neither entry: they are classification runs on real data.
A run that does not say (an older run, or one that has not written its summary yet: killed,
failed, still running) gets the task whose headline metric its eval rows hold (`infer_metric`),
else classification.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterable

from analysis.columns import ACCURACY

# The task of runs that do not record one (older runs): the runner only trained classifiers then.
DEFAULT_KIND = "classification"
DEFAULT_METRIC = ACCURACY
REAL = "real"
STAND_IN = "stand-in"
UNKNOWN_STAND_IN = "stand-in: possibly (no summary.json, and dataset.if_missing=stand_in allowed one)"

# Headline metric -> task kind, in the order eval columns are searched when a run does not say.
KINDS = {"eval/accuracy": "classification", "eval/perplexity": "language_model", "eval/hr10": "recommendation"}


@dataclass(frozen=True)
class MetricSpec:
    """How one eval metric reads: `label` for axes and table titles, `fmt` for its numbers
    (values as logged: fractions for accuracies and hit rates, "{:.2%}" shows them as %)."""

    name: str
    label: str
    fmt: str
    higher_is_better: bool = True

    @property
    def title(self) -> str:
        """The label, with "(lower is better)" where lower is better: a reader of a perplexity
        column or axis must not have to know which way is good."""
        return self.label if self.higher_is_better else f"{self.label} (lower is better)"

    @property
    def percent(self) -> bool:
        return self.fmt.endswith("%}")

    def plotted(self, values: Any) -> Any:
        """Values as figures plot them: percentages for metrics shown as % (accuracy, HR@10)."""
        return values * 100.0 if self.percent else values

    def axis_label(self, prefix: str = "eval ") -> str:
        """"eval accuracy (%)", "eval perplexity (lower is better)": the axis of `plotted` values."""
        return f"{prefix}{self.title}" + (" (%)" if self.percent else "")

    def format(self, value: Any) -> str:
        """One value as text; "-" when missing."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "-"
        return self.fmt.format(value)


_KNOWN = {
    "eval/accuracy": MetricSpec("eval/accuracy", "accuracy", "{:.2%}"),
    "eval/top5": MetricSpec("eval/top5", "top-5 accuracy", "{:.2%}"),
    "eval/perplexity": MetricSpec("eval/perplexity", "perplexity", "{:.2f}", higher_is_better=False),
    "eval/loss": MetricSpec("eval/loss", "eval loss", "{:.4f}", higher_is_better=False),
}
# Recommendation metrics carry their cut-off: eval/hr10, eval/ndcg10 (eval/hr20 with top_k=20).
_AT_K = {"hr": "HR", "ndcg": "NDCG"}
_AT_K_NAME = re.compile(r"eval/(hr|ndcg)(\d+)$")


def metric_spec(name: str, higher_is_better: bool | None = None) -> MetricSpec:
    """Label, format and direction of the eval metric `name`. Unknown metrics read as their
    name without `eval/`, in 4 significant digits; `higher_is_better` (from the run's summary)
    overrides the direction when given."""
    spec = _KNOWN.get(name)
    if spec is None:
        match = _AT_K_NAME.match(str(name))
        if match:
            spec = MetricSpec(name, f"{_AT_K[match.group(1)]}@{match.group(2)}", "{:.2%}")
        else:
            spec = MetricSpec(name, str(name).removeprefix("eval/"), "{:.4g}")
    if higher_is_better is not None and not _missing(higher_is_better) and bool(higher_is_better) != spec.higher_is_better:
        spec = MetricSpec(spec.name, spec.label, spec.fmt, bool(higher_is_better))
    return spec


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
        "higher_is_better": metric_spec(metric).higher_is_better if direction is None else bool(direction),
        "data_source": source,
    }


def fill_task(row: dict[str, Any], eval_columns: Iterable[str]) -> None:
    """Completes, in place, the task columns that a run's summary did not give (runs-table row
    `row`, its eval rows' columns): the metric is the headline metric its eval rows or summary
    hold (older runs: accuracy), else accuracy; the data is real unless the run has no summary
    and its config let a stand-in replace missing data (flagged as possible: only the summary
    would have said)."""
    if not row.get("task_metric"):
        logged = set(eval_columns) | {key for key in row if str(key).startswith("eval/")}
        metric = infer_metric(logged) or DEFAULT_METRIC
        row.update(task=kind_of(metric), task_metric=metric, higher_is_better=metric_spec(metric).higher_is_better)
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
