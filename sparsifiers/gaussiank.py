"""Gaussian-k (Shi et al. 2019): a threshold from a normal fit of acc, refined toward k.

Instead of sorting, each rank assumes its accumulator is normally distributed and reads the
threshold that leaves a fraction d of |acc| above it, then corrects it with a few counting passes:

    1. Fit (every step): mean and standard deviation of acc (sample std, as torch.std);
       lambda = mean + std * Phi^-1(1 - d / 2).
    2. Refine: count |acc| >= lambda; if the count is below 2k/3, halve lambda; if above 4k/3,
       multiply it by 1.5; else stop. At most `max_scans` counting passes (Shi et al.'s loop
       bound is 3); the last lambda counted is the one used.
    3. Selection: every index with |acc| >= lambda (the last lambda counted), over the whole vector.
    4. Exchange: union_allreduce (ranks overlap: build-up occurs).

Each rank fits its own accumulator, so lambda is per rank and nothing carries over between steps.
Shi et al.'s code selects |acc| > lambda (strictly); >= is used here, as by every threshold method
of this package, which differs only for elements exactly equal to lambda.
"""
from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import torch

from experiments.runformat import metric_keys as keys
from experiments.runformat.errors import ConfigError
from sparsifiers.common.base import SelectionScope, Sparsifier
from sparsifiers.common.exchange_kinds import ExchangeKind
from sparsifiers.common.layout import Layout
from sparsifiers.common.threshold_control import ThresholdScan


class GaussianK(Sparsifier):
    """Gaussian-k with error feedback: normal-fit threshold, a few counting passes toward k."""

    name = "gaussiank"
    scope = SelectionScope.WHOLE
    exchanges = (ExchangeKind.UNION_ALLREDUCE,)

    def __init__(self, layout: Layout, world_size: int, rank: int, density: float, max_scans: int = 3, **knobs) -> None:
        super().__init__(layout, world_size, rank, density=density, **knobs)
        if not isinstance(max_scans, int) or isinstance(max_scans, bool) or max_scans < 1:
            raise ConfigError(f"sparsifier.max_scans must be an integer >= 1, got {max_scans}: e.g. 3")
        self.max_scans = max_scans
        self.quantile = NormalDist().inv_cdf(1.0 - self.density / 2.0)  # Phi^-1(1 - d/2)
        self._last = {"threshold": math.nan, "scans": 0}  # the last step's, for metrics
        self._scan = ThresholdScan()

    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> torch.Tensor:
        # 1. Fit: one reduction pass, no full-size temporary.
        std, mean = torch.std_mean(acc, correction=1 if self.numel > 1 else 0)
        threshold = float(mean) + float(std) * self.quantile
        # 2. Refine toward k with counting passes (selection kernels: one read of acc each).
        self._scan.load(acc)
        scans = 0
        while True:
            count = self._scan.count(threshold)
            scans += 1
            if scans == self.max_scans or 2 * self.k / 3 <= count <= 4 * self.k / 3:
                break
            threshold *= 0.5 if count < 2 * self.k / 3 else 1.5
        self._last = {"threshold": threshold, "scans": scans}
        # 3. Selection at the last lambda counted.
        return self._scan.indices(0)

    def metrics(self) -> dict[str, float | list[float]]:
        return {keys.THRESHOLD: self._last["threshold"], keys.SCANS: float(self._last["scans"])}

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "max_scans": self.max_scans, "quantile": self.quantile}
