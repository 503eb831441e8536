"""The headline metrics, in one place: per number a run reports, its key, label, unit, format and
how a run reduces it. summary.json, the terminal table and summary, the sweep report and the
comparison figure all read this registry and reduce with `reduce_logged`, so one run shows one
number everywhere.

THE ONE REDUCTION RULE. Every per-run number is reduced from the run's LOGGED train rows (what
metrics.jsonl holds; steps between logging steps are never seen):
- timings: median over logged steps at or after `warmup_steps` (all logged steps when none is
  that late: a short run still gets a number);
- counts-based metrics (traffic, density actual/target/error, build-up, load imbalance,
  overlap): mean over logged steps; |density error| is the mean of |error|;
- the settled density error: mean over the later half of the logged rows that hold a density
  error (the last ceil(m/2) of those m rows; a skipped step's row holds none), so a threshold
  controller that settles shows it even in a short run;
- the task metric (and every eval/* metric): its last evaluation, even when that one is not
  finite (then the number is missing, shown "-", and the report flags the run);
- state that is not a headline (train loss, lr, error-feedback norms): the last logged value.
A non-finite value (NaN, infinity) is a missing one on every path: metrics.jsonl writes it as
null, the summary accumulator maps it the same way, summary.json never holds it, and every
reduction but the last evaluation leaves missing values out (a skipped step's row has no density).

Neutral module: it imports nothing from experiments' roles, so the rank process, the launcher
and analysis all may import it.
"""
from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass, replace
from typing import Any, Iterable, Sequence

import numpy as np

from experiments.runformat import metric_keys as keys


class Reduction(enum.Enum):
    """How one run's logged values of a metric become its one number."""

    MEDIAN_AFTER_WARMUP = "median over logged steps at or after warmup_steps"
    MEAN = "mean over logged steps"
    MEAN_ABS = "mean |value| over logged steps"
    MEAN_LATER_HALF = "mean over the later half of the logged rows that hold a value"
    LAST_EVAL = "last evaluation"
    LAST = "last logged value"


@dataclass(frozen=True)
class Headline:
    """One reported number. `key`: its name in summary.json (and in metrics.jsonl when `source`
    is None); `source`: the logged key it is reduced from when that differs (|error|, settled
    error); `stat`: its column in analysis.stats.run_stats; `scale`: applied before `fmt` (bytes
    shown as MB) and in run_stats' column; `label`: the long label (terminal summary, axes);
    `short`: the column title of tables when the label is too long for one; `unit`: of the
    value as shown (after `scale`)."""

    key: str
    label: str
    fmt: str
    reduce: Reduction
    short: str = ""
    unit: str = ""
    scale: float = 1.0
    stat: str | None = None
    source: str | None = None
    higher_is_better: bool | None = None

    @property
    def logged_key(self) -> str:
        """The metrics.jsonl key this number is reduced from."""
        return self.source or self.key


    @property
    def title(self) -> str:
        """Table column title: `short` (else the label), with "(lower is better)" where lower is
        better: a reader of a perplexity column or axis must not have to know which way is good."""
        text = self.short or self.label
        return f"{text} (lower is better)" if self.higher_is_better is False else text

    @property
    def percent(self) -> bool:
        return self.fmt.endswith("%}")

    def format(self, value: Any) -> str:
        """One raw value (as logged or in summary.json) as text; "-" when missing."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "-"
        return self.fmt.format(value * self.scale)

    # -- task metrics read as analysis.tasks described them (table titles, axes)
    def plotted(self, values: Any) -> Any:
        """Values as figures plot them: percentages for metrics shown as % (accuracy, HR@10)."""
        return values * 100.0 if self.percent else values

    def axis_label(self, prefix: str = "eval ") -> str:
        """"eval accuracy (%)", "eval perplexity (lower is better)"."""
        return f"{prefix}{self.title}" + (" (%)" if self.percent else "")


_MEDIAN, _MEAN = Reduction.MEDIAN_AFTER_WARMUP, Reduction.MEAN


# Every number summary.json reduces from the logged train rows: timings, traffic, density,
# selection shape, then the state that is not a headline (last logged values).
HEADLINES: dict[str, Headline] = {h.key: h for h in (
    Headline(keys.SELECT_MAX, "select ms, slowest rank (median step)", "{:.4g}", _MEDIAN, short="select ms max", unit="ms", stat="select_ms_max"),
    Headline(keys.SELECT_MEAN, "select ms, mean over ranks (median step)", "{:.4g}", _MEDIAN, short="select ms mean", unit="ms", stat="select_ms_mean"),
    Headline(keys.COMPUTE_MAX, "compute ms, slowest rank (median step)", "{:.4g}", _MEDIAN, short="compute ms", unit="ms", stat="compute_ms"),
    Headline(keys.COMPUTE_MEAN, "compute ms, mean over ranks (median step)", "{:.4g}", _MEDIAN, unit="ms"),
    Headline(keys.EXCHANGE, "exchange ms, slowest rank (median step)", "{:.4g}", _MEDIAN, short="exchange ms", unit="ms", stat="exchange_ms"),
    Headline(keys.EXCHANGE_MODEL, "exchange ms, network model (median step)", "{:.4g}", _MEDIAN, short="exchange model ms", unit="ms", stat="exchange_model_ms"),
    Headline(keys.DENSE_MODEL, "dense allreduce ms, network model (median step)", "{:.4g}", _MEDIAN, unit="ms"),
    Headline(keys.STEP, "step ms, slowest rank (median step)", "{:.4g}", _MEDIAN, short="step ms", unit="ms", stat="step_ms"),
    Headline(keys.SENT_MAX, "MB sent per rank per step (busiest rank, mean)", "{:.4f}", _MEAN, short="MB sent/rank/step", unit="MB", scale=1e-6, stat="mb_sent"),
    Headline(keys.SENT_MEAN, "MB sent per rank per step (mean rank, mean)", "{:.4f}", _MEAN, unit="MB", scale=1e-6),
    Headline(keys.RECV_MAX, "MB received per rank per step (busiest rank, mean)", "{:.4f}", _MEAN, unit="MB", scale=1e-6),
    Headline(keys.RECV_MEAN, "MB received per rank per step (mean rank, mean)", "{:.4f}", _MEAN, unit="MB", scale=1e-6),
    Headline(keys.DENSE_BYTES, "MB per rank of the dense allreduce", "{:.4f}", _MEAN, unit="MB", scale=1e-6),
    Headline(keys.RATIO, "traffic vs dense allreduce (mean)", "{:.4f}", _MEAN, short="traffic ratio", stat="traffic_ratio"),
    Headline(keys.DENSITY_ACTUAL, "density actual |U|/N (mean)", "{:.5f}", _MEAN, short="density actual", stat="density_actual"),
    Headline(keys.DENSITY_TARGET, "density target k/N (mean)", "{:.5f}", _MEAN, short="density target", stat="density_target"),
    Headline(keys.DENSITY_ERROR, "density error |U|/k-1 (mean)", "{:+.3f}", _MEAN, short="error |U|/k-1", stat="density_error"),
    Headline(keys.DENSITY_ERROR_SETTLED, "density error |U|/k-1 (later half of steps)", "{:+.3f}", Reduction.MEAN_LATER_HALF,
       short="settled error", stat="density_error_settled", source=keys.DENSITY_ERROR),
    Headline(keys.DENSITY_ABS_ERROR, "|density error| (mean)", "{:.3f}", Reduction.MEAN_ABS, short="|error|",
       stat="abs_density_error", source=keys.DENSITY_ERROR),
    Headline(keys.BUILDUP, "build-up |U| / selection (mean)", "{:.3f}", _MEAN, short="build-up", stat=keys.BUILDUP),
    Headline(keys.OVERLAP, "selection overlap (mean)", "{:.3f}", _MEAN),
    Headline(keys.K_MAX, "largest selection |S_r| (mean)", "{:.1f}", _MEAN),
    Headline(keys.K_MEAN, "mean selection |S_r| (mean)", "{:.1f}", _MEAN),
    Headline(keys.LOAD_IMBALANCE, "load imbalance W max|S_r| / sum|S_r| - 1 (mean)", "{:.3f}", _MEAN,
       short="load imbalance", stat="load_imbalance"),
    Headline(keys.LOSS, "train loss (last logged)", "{:.4f}", Reduction.LAST, short="train loss"),
    Headline(keys.LR, "learning rate (last logged)", "{:.4g}", Reduction.LAST),
    Headline(keys.RESIDUAL, "error-feedback residual norm (last logged)", "{:.4g}", Reduction.LAST),
    Headline(keys.REL_RESIDUAL, "residual / accumulated norm (last logged)", "{:.4g}", Reduction.LAST),
)}

# Task metrics (eval rows): each run's headline is its own task's (summary.json's task.metric).
_TASK_METRICS: dict[str, Headline] = {h.key: h for h in (
    Headline(keys.ACCURACY, "accuracy", "{:.2%}", Reduction.LAST_EVAL, higher_is_better=True),
    Headline(keys.TOP5, "top-5 accuracy", "{:.2%}", Reduction.LAST_EVAL, higher_is_better=True),
    Headline(keys.PERPLEXITY, "perplexity", "{:.2f}", Reduction.LAST_EVAL, higher_is_better=False),
    Headline(keys.EVAL_LOSS, "eval loss", "{:.4f}", Reduction.LAST_EVAL, higher_is_better=False),
)}
# Recommendation metrics carry their cut-off: eval/hr10, eval/ndcg10 (eval/hr20 with top_k=20).
_AT_K = {"hr": "HR", "ndcg": "NDCG"}
_AT_K_NAME = re.compile(r"eval/(hr|ndcg)(\d+)$")


def task_metric(key: str, higher_is_better: bool | None = None) -> Headline:
    """The headline of eval metric `key` (reduced to its last evaluation). Unknown metrics read
    as their name without `eval/`, in 4 significant digits, higher is better; `higher_is_better`
    (from the run's summary) overrides the direction when given."""
    spec = _TASK_METRICS.get(key)
    if spec is None:
        match = _AT_K_NAME.match(str(key))
        label = f"{_AT_K[match.group(1)]}@{match.group(2)}" if match else str(key).removeprefix(keys.EVAL_PREFIX)
        spec = Headline(str(key), label, "{:.2%}" if match else "{:.4g}", Reduction.LAST_EVAL, higher_is_better=True)
    if higher_is_better is not None and not _missing(higher_is_better) and bool(higher_is_better) != spec.higher_is_better:
        spec = replace(spec, higher_is_better=bool(higher_is_better))
    return spec


def headline(key: str) -> Headline:
    """The registry entry of `key` (a task metric for eval/* keys)."""
    return HEADLINES[key] if key in HEADLINES else task_metric(key)


def reduce_logged(how: Reduction, values: Sequence[float] | np.ndarray, late: Sequence[bool] | np.ndarray | None = None) -> float:
    """One run's number from its logged values of one metric, in step order. `late`: per value,
    whether its step is at or after warmup_steps (timings only). NaN for no value.

    A non-finite value (NaN or infinity) is a missing one, as metrics.jsonl writes it (null):
    left out of every reduction but LAST_EVAL, where the last evaluation's value is the number
    even when it is missing (an earlier evaluation never stands in for it)."""
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        return float("nan")
    if how is Reduction.LAST_EVAL:  # the caller orders evaluations by (step, epoch)
        return float(values[-1]) if math.isfinite(values[-1]) else float("nan")
    keep = np.isfinite(values)
    if late is not None:
        late = np.asarray(late, dtype=bool)[keep]
    values = values[keep]
    if values.size == 0:
        return float("nan")
    if how is Reduction.MEDIAN_AFTER_WARMUP:
        if late is not None and late.any():
            values = values[late]
        return float(np.median(values))
    if how is Reduction.MEAN:
        return float(np.mean(values))
    if how is Reduction.MEAN_ABS:
        return float(np.mean(np.abs(values)))
    if how is Reduction.MEAN_LATER_HALF:
        # the later half of the rows that HOLD a value: the last ceil(m/2) of those m rows
        return float(np.mean(values[len(values) // 2:]))
    return float(values[-1])  # LAST: the last row that holds a value (a skipped row holds no loss)


def reduce_run(train: Iterable[dict[str, Any]], evals: Iterable[dict[str, Any]], warmup_steps: int) -> dict[str, float]:
    """A run's headline numbers from its logged train rows and eval rows (metrics.jsonl records,
    in the order logged): every HEADLINES entry with a value, and every eval/* key's value at the
    last evaluation (NaN when that one is missing or non-finite). The reference the streaming
    SummaryAccumulator and analysis.stats.run_stats agree with."""
    train, evals = list(train), sorted(evals, key=lambda row: (row.get("step", 0), row.get("epoch", 0)))
    late = [row.get("step", 0) >= warmup_steps for row in train]
    result = {}
    for spec in HEADLINES.values():
        values = [_number(row.get(spec.logged_key)) for row in train]
        value = reduce_logged(spec.reduce, values, late)
        if not math.isnan(value):
            result[spec.key] = value
    for key in dict.fromkeys(key for row in evals for key in row if str(key).startswith(keys.EVAL_PREFIX)):
        # NaN kept: a last evaluation without a finite value is shown "-" and flagged, never
        # replaced by an earlier evaluation's value
        result[key] = reduce_logged(Reduction.LAST_EVAL, [_number(row.get(key)) for row in evals])
    return result


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else float("nan")


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
