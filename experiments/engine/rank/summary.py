"""summary.json's numbers, streamed: the rank process hosting rank 0 feeds the accumulator every
row it logs and reduces them at the end by the one reduction rule (experiments/runformat/headline.py), so
the summary is the same reduction of the same rows as the report's (headline.reduce_run is the
reference both agree with)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from experiments.runformat import metric_keys as keys
from experiments.runformat.divergence import diverged
from experiments.runformat.headline import HEADLINES, reduce_logged

# The headline keys summary.json reduces, as logged (settled and |error| share density/error).
SUMMARY_SOURCES = tuple(dict.fromkeys(spec.logged_key for spec in HEADLINES.values()))


@dataclass
class SummaryAccumulator:
    """Collects what summary.json reports by the one reduction rule (experiments/runformat/headline.py):
    it keeps the logged values of the few headline keys (one float each per logged row, NaN
    where a row lacks the key), never every step."""

    warmup_steps: int
    steps: int = 0
    sent_total: np.ndarray | None = None  # bytes each rank sent over the whole run (every step)
    logged: dict[str, list[float]] = field(default_factory=dict)  # SUMMARY_SOURCES key -> per logged row
    late: list[bool] = field(default_factory=list)  # per logged row: step >= warmup_steps
    evals: dict[str, float] = field(default_factory=dict)  # eval/* of the latest evaluation
    last: dict[str, float] = field(default_factory=dict)  # latest logged values (the epoch table)
    # (step, value) of every logged loss and evaluated accuracy: the divergence rule reads the series
    losses: list[tuple[int, float]] = field(default_factory=list)
    accuracies: list[tuple[int, float]] = field(default_factory=list)

    def add_step(self, metrics: dict[str, float], sent_per_rank: np.ndarray) -> None:
        """Every step: only the bytes sent add up (traffic/sent_bytes_total_max is not a headline
        and sums every step); `metrics` is this step's, logged or not."""
        self.sent_total = sent_per_rank.copy() if self.sent_total is None else self.sent_total + sent_per_rank
        self.steps += 1

    def add_logged(self, step: int, metrics: dict[str, float]) -> None:
        """A train row as it is logged."""
        self.last.update(metrics)
        self.late.append(step >= self.warmup_steps)
        for key in SUMMARY_SOURCES:
            self.logged.setdefault(key, []).append(_as_logged(metrics.get(key)))
        self.losses.append((step, _as_logged(metrics.get(keys.LOSS))))

    def add_eval(self, metrics: dict[str, float]) -> None:
        """An eval row as it is logged (evaluations come in step order: the last one counts)."""
        self.last.update(metrics)
        # This evaluation's values replace the earlier ones, a missing one too (NaN: summary.json
        # writes it as null): an earlier epoch's value must never stand in for the last one.
        self.evals = {key: float("nan") for key in self.evals}
        self.evals.update({key: _as_logged(value) for key, value in metrics.items() if key.startswith(keys.EVAL_PREFIX)})

    def add_accuracy(self, step: int, metrics: dict[str, float]) -> None:
        """An evaluation's accuracy, with its step (a task without one logs none)."""
        if keys.ACCURACY in metrics:
            self.accuracies.append((step, _as_logged(metrics[keys.ACCURACY])))

    def divergence(self, classes: int | None) -> dict | None:
        """summary.json's `diverged` (experiments/runformat/divergence.py)."""
        return diverged(self.losses, self.accuracies, classes)

    def summary(self) -> dict[str, float]:
        """The reduced numbers: headlines with a value, the sent-bytes total, and every eval/*
        value of the last evaluation (NaN when missing; summary.json writes it as null)."""
        result = {}
        for spec in HEADLINES.values():
            value = reduce_logged(spec.reduce, self.logged.get(spec.logged_key, []), self.late)
            if not math.isnan(value):
                result[spec.key] = value
        if self.sent_total is not None:
            result[keys.SENT_TOTAL_MAX] = float(self.sent_total.max())
        result.update(self.evals)
        return result


def _as_logged(value: object) -> float:
    """A value as metrics.jsonl keeps it: NaN (the file's null) when absent or not finite."""
    if value is None:
        return float("nan")
    number = float(value)
    return number if math.isfinite(number) else float("nan")
