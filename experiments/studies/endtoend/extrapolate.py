"""The statistics an exchange's cost depends on, from the hosted worker counts to any W.

Measured at every hosted W (experiments/studies/endtoend/runs.py): |U| (the coordinates aggregated),
k_max (the busiest rank's count) and the selection time, each the mean over the W's runs (a
study runs its statistics from several seeds: one 40-step run's |U| differs from another seed's
by up to 5%, and a quadratic extrapolated 8-fold multiplies that noise). The rule, per statistic:

- |U|, for methods whose every rank selects over the whole vector: a least-squares fit of
  log |U| against log W over the hosted W, a quadratic (three or more hosted W; a line with two;
  the value itself with one), used as measured at a hosted W and as fitted beyond. The quadratic
  catches what a power law misses: Top-k's union grows more slowly as W grows (the ranks' top
  coordinates overlap more). Beyond the largest hosted W the fitted curve is held monotone (it
  may not turn back) and anchored at the largest hosted value.
- |U|, for methods that split the vector (MiCRO, ExDyna, CLT-k; DEFT where it is not replayed):
  a level, the mean over the hosted W. What they aggregate is set by a threshold or an
  allocation, not by W (no build-up, by design), so the hosted W are samples of one level; a
  curve fitted through their noise bent ExDyna's union 38% down at W = 256 in the check.
- k_max, for methods whose every rank selects over the whole vector (Top-k, DGC, CLT-k's leader):
  the median over the hosted W (each rank's count does not depend on W).
- k_max, for methods that split the vector (DEFT, MiCRO, ExDyna), when their largest hosted run
  logged where its coordinates lay (position_bins > 0): the method's own partition rule replayed
  at W on those positions (structure.py), each replay scaled by measured / replayed at its own
  run, the replays of every run at the two largest such hosted W averaged (REPLAYED). DEFT's |U|
  too: its k_l >= 1 on every unit adds up to a coordinate per unit, and units multiply with W.
  A power law cannot follow these: ExDyna's last partition keeps the remainder of its blocks
  whatever W is, and a dense region (the classifier) fills MiCRO's busiest partition.
- k_max, for split methods logged without positions: |U| / W times the imbalance ratio
  r = W k_max / |U| (the busiest rank over the mean), r a power law in W fitted over the hosted W.
- a leader's plan (the payload of its broadcast): DEFT's replayed length, W + 1 + its units at W;
  else a line a + b W over the hosted W (its value with one; CLT-k's k indices do not grow).
- every value within bounds: |U| <= N, k_max <= |U|.
- selection ms: a + b / W, least squares over the hosted W, for methods that split the work
  (their ranks scan N / W coordinates), when the fit finds such a trend (a, b >= 0); else, and
  for methods whose every rank scans the whole vector, the median over the hosted W.

`check` compares the rule, fitted on W <= `fit_max`, with hosted runs beyond it (the issue's
W = 64, 128, 256 against a fit on W <= 32).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np

from experiments.studies.endtoend.structure import Structure


# Replays averaged: each hosted run is one sample of where the coordinates lie (its own data order
# and training state: ExDyna's busiest rank moved 8% between runs where the partitions alone
# predict no change); the largest hosted W are the nearest the W extrapolated to.
REPLAYED = 2


@dataclass(frozen=True)
class LogFit:
    """log(value) = polynomial(log W), fitted on `workers`; measured values where hosted."""

    workers: tuple[int, ...]
    values: tuple[float, ...]
    coefficients: tuple[float, ...]  # highest power first (numpy.polyfit)
    increasing: bool  # the direction the curve keeps beyond the largest hosted W

    @classmethod
    def fit(cls, workers: list[int], values: list[float], max_degree: int = 2) -> "LogFit":
        pairs = sorted((w, v) for w, v in zip(workers, values) if v > 0)
        if not pairs:
            return cls(tuple(workers), tuple(values), (0.0,), True)
        x = np.log([w for w, _ in pairs])
        y = np.log([v for _, v in pairs])
        degree = min(max_degree, len(pairs) - 1)
        coefficients = tuple(np.polyfit(x, y, degree)) if degree else (float(y[0]),)
        increasing = pairs[-1][1] >= pairs[0][1]
        return cls(tuple(w for w, _ in pairs), tuple(v for _, v in pairs), coefficients, increasing)

    def curve(self, workers: float) -> float:
        return float(math.exp(np.polyval(self.coefficients, math.log(workers))))

    def at(self, workers: int) -> float:
        if workers in self.workers:
            return self.values[self.workers.index(workers)]
        largest = self.workers[-1]
        if workers < largest:
            return self.curve(workers)
        # Beyond the hosted range: follow the curve only while it keeps its direction.
        value, w = self.curve(largest), largest
        while w < workers:
            w = min(w * 2, workers)
            step = self.curve(w)
            value = max(value, step) if self.increasing else min(value, step)
        return value * self.values[-1] / self.curve(largest)  # anchored at the measured value

    def describe(self) -> str:
        terms = " ".join(f"{c:+.4g}" for c in self.coefficients)
        return f"log-poly in log W [{terms}] on W = {', '.join(map(str, self.workers))}"


@dataclass(frozen=True)
class Level:
    """A statistic that does not depend on W: as measured where hosted, the mean over the hosted W
    beyond (every hosted W is one more sample of the same level)."""

    workers: tuple[int, ...]
    values: tuple[float, ...]

    def at(self, workers: int) -> float:
        if workers in self.workers:
            return self.values[self.workers.index(workers)]
        return statistics.fmean(self.values)


@dataclass(frozen=True)
class SelectionFit:
    """Selection ms = a + b / W (split work) or a constant (whole-vector work)."""

    a: float
    b: float
    workers: tuple[int, ...]
    values: tuple[float, ...]

    @classmethod
    def fit(cls, workers: list[int], values: list[float], split: bool) -> "SelectionFit":
        if not split or len(set(workers)) < 2:
            return cls(statistics.median(values), 0.0, tuple(workers), tuple(values))
        inverse = np.array([1.0 / w for w in workers])
        b, a = np.polyfit(inverse, np.array(values), 1)
        if b <= 0 or a < 0:  # no 1/W trend in the measurements (noise, a fixed cost): their median
            return cls(statistics.median(values), 0.0, tuple(workers), tuple(values))
        return cls(float(a), float(b), tuple(workers), tuple(values))

    def at(self, workers: int) -> float:
        if workers in self.workers:
            return self.values[self.workers.index(workers)]
        return self.a + self.b / workers


@dataclass(frozen=True)
class LinearFit:
    """value = a + b W over the hosted W; the measured value where hosted."""

    a: float
    b: float
    workers: tuple[int, ...]
    values: tuple[float, ...]

    @classmethod
    def fit(cls, workers: list[int], values: list[float]) -> "LinearFit":
        if len(set(workers)) < 2:
            return cls(statistics.median(values), 0.0, tuple(workers), tuple(values))
        b, a = np.polyfit(np.array(workers, dtype=float), np.array(values, dtype=float), 1)
        return cls(float(a), float(b), tuple(workers), tuple(values))

    def at(self, workers: int) -> float:
        if workers in self.workers:
            return self.values[self.workers.index(workers)]
        return max(0.0, self.a + self.b * workers)


@dataclass(frozen=True)
class Replay:
    """One hosted run's replay of its split method at other W (structure.py), with what that run
    measured: each replay is anchored at its own run (scaled by measured / replayed at its W)."""

    workers: int
    structure: Structure
    measured: dict[str, float]  # the run's own k_max and union

    def at(self, statistic: str, workers: int) -> float | None:
        own = self.structure.at(self.workers)
        if statistic not in own:
            return None
        here, there = self.structure.at(workers)[statistic], own[statistic]
        return here * self.measured[statistic] / there if there > 0 else here


@dataclass(frozen=True)
class Statistics:
    """One method's fitted statistics (module docstring) and the bounds they keep."""

    union: LogFit | Level
    k_max: float | None  # whole-vector methods: the median over hosted W
    imbalance: LogFit | None  # split methods: r = W k_max / |U|
    measured_k_max: dict[int, float]
    selection: SelectionFit
    numel: int
    plan: LinearFit | None = None  # a leader's plan payload, when the method broadcasts one
    # A split method's replays at other W: every run (every seed) at the REPLAYED largest hosted
    # W whose runs logged positions.
    replays: tuple[Replay, ...] = ()

    def _replayed(self, statistic: str, workers: int) -> float | None:
        """The mean over the replays of each one at `workers`, anchored at its own run."""
        values = [replay.at(statistic, workers) for replay in self.replays]
        return statistics.fmean(values) if values and None not in values else None

    def at(self, workers: int) -> dict[str, float]:
        union = self.union.at(workers)
        if workers not in self.union.workers:
            union = self._replayed("union", workers) or union
        union = min(union, float(self.numel))
        if workers in self.measured_k_max:
            k_max = self.measured_k_max[workers]
        elif (replayed := self._replayed("k_max", workers)) is not None:
            k_max = replayed
        elif self.imbalance is not None:
            k_max = union / workers * max(1.0, self.imbalance.at(workers))
        else:
            k_max = self.k_max
        stats = {"union": union, "k_max": min(k_max, union), "select_ms": self.selection.at(workers)}
        replayed_plan = self.replays[-1].structure.at(workers).get("plan") if self.replays else None
        if replayed_plan is not None:
            stats["plan"] = replayed_plan  # the layout's, exactly
        elif self.plan is not None:
            stats["plan"] = self.plan.at(workers)
        return stats


def fit_statistics(workers: list[int], unions: list[float], k_maxes: list[float], select_ms: list[float],
                   numel: int, split: bool, plans: list[int] | None = None,
                   replays: list[Replay] | None = None) -> Statistics:
    """The fitted statistics of one method from its hosted W (module docstring), each W's values
    the mean over its runs; `plans`: the payload of its leader's plan at each W, when it
    broadcasts one; `replays`: a split method's replay of each run that logged positions."""
    measured = dict(zip(workers, k_maxes))
    plan = LinearFit.fit(workers, [float(p) for p in plans]) if plans else None
    selection = SelectionFit.fit(workers, select_ms, split)
    replayed = sorted({r.workers for r in replays or () if r.workers in measured})[-REPLAYED:]
    replay = {"replays": tuple(r for r in replays or () if r.workers in replayed)}
    if split:
        ratios = [w * k / u if u > 0 else 1.0 for w, k, u in zip(workers, k_maxes, unions)]
        return Statistics(Level(tuple(workers), tuple(unions)), None, LogFit.fit(workers, ratios, max_degree=1),
                          measured, selection, numel, plan, **replay)
    return Statistics(LogFit.fit(workers, unions), statistics.median(k_maxes), None, measured, selection, numel, plan,
                      **replay)
