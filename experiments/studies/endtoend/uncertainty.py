"""Steps to the target over seeds, their interval, and when a pick is named.

Each method's accuracy runs (one per seed) give its steps to the target: the steps done at the
first evaluation that reached it (runs.py). The modelled time to the target is those steps times
the modelled step (model.py), which does not depend on the seed: the time's uncertainty is the
steps'. Per method:

- the point estimate: the mean of its seeds' steps;
- the interval: the Student-t 95% confidence interval of that mean, mean +- t(0.975, n-1) s/sqrt(n)
  over its n seeds (s their standard deviation), its lower end at least 0. The mean is what the
  tables report, so its interval is the one that says whether two methods' means differ; the
  range of 3 seeds would cover little more than half of a fourth seed's draws. With n = 3 the
  half-width is 2.5 s: a wide interval, honestly so. One seed gives no spread: its interval is
  its steps at both ends (and no tie can be seen);
- a seed that never reached the target needed more steps than its run evaluated: the method has
  no point estimate (it is never treated as reaching), its interval's upper end is open, and its
  lower end is the interval's computed with that seed's last evaluated steps (a lower bound on
  its steps). Such a seed widens the spread, so the lower end can fall: the rule errs toward a
  tie, never toward naming a pick.

A pick (the fastest to the target) is named only when its interval separates from every other
method's: its upper end below their lower ends. Otherwise the cell is a tie within noise, naming
the methods whose intervals reach below the fastest's upper end.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from scipy.stats import t as student_t

CONFIDENCE = 0.95
TIE = "tie (within noise)"


@dataclass(frozen=True)
class Steps:
    """One method's steps to the target, one entry per seed."""

    reached: tuple[int | None, ...]  # the steps done at the first evaluation that reached it; None: never
    evaluated: tuple[int, ...]  # the steps done at each seed's last evaluation
    seeds: tuple[int, ...] = ()

    @staticmethod
    def single(steps: int | None, evaluated: int | None = None) -> Steps:
        return Steps((steps,), (evaluated if evaluated is not None else steps or 0,))

    @property
    def mean(self) -> float | None:
        """The point estimate; None when a seed never reached the target."""
        if not self.reached or any(s is None for s in self.reached):
            return None
        return statistics.fmean(self.reached)

    @property
    def interval(self) -> tuple[float, float | None]:
        """(lower, upper) of the mean steps; upper None: open (a seed never reached the target)."""
        values = [s if s is not None else last for s, last in zip(self.reached, self.evaluated)]
        mean = statistics.fmean(values)
        half = 0.0
        if len(values) > 1:
            half = float(student_t.ppf(0.5 + CONFIDENCE / 2, len(values) - 1)) * statistics.stdev(values) / math.sqrt(len(values))
        return max(0.0, mean - half), (None if self.mean is None else mean + half)

    def describe(self) -> str:
        """"100, 110, never (>120)": each seed's steps."""
        return ", ".join(str(s) if s is not None else f"never (>{last})" for s, last in zip(self.reached, self.evaluated))


def separated(upper: float, lower: float) -> bool:
    """Whether an interval ending at `upper` lies wholly below one starting at `lower`."""
    return upper < lower


def interval_text(low: float, high: float | None, digits: str = ".3g") -> str:
    return f"{low:{digits}}-{'open' if high is None else format(high, digits)}"
