"""Hard threshold (Sahu et al., NeurIPS 2021): a fixed lambda over the whole vector.

    1. Threshold (once): lambda = `threshold`, by default 1 / (2 sqrt(k)), and never changed.
    2. Selection (every step): every index with |acc| >= lambda, over the whole vector.
       `comparison`: released (lambda rounded to the nearest float32, as the released code
       compares) or exact (threshold_control.py).
    3. Exchange: union_allreduce. Nothing steers the count, so the density is uncontrolled, and
       ranks select overlapping sets over the same vector: build-up occurs.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from experiments.runformat import metric_keys as keys
from experiments.runformat.errors import ConfigError
from sparsifiers.common.base import SelectionScope, Sparsifier
from sparsifiers.common.exchange_kinds import ExchangeKind
from sparsifiers.common.layout import Layout
from sparsifiers.common.threshold_control import ThresholdScan, check_comparison, initial_threshold


def _positive_number(value: Any) -> bool:
    """A finite real number above 0 (a bool is not a number here)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and math.isfinite(value) and value > 0


class HardThreshold(Sparsifier):
    """Fixed-threshold selection with error feedback; `density` only sets the default lambda."""

    name = "threshold"
    scope = SelectionScope.WHOLE
    exchanges = (ExchangeKind.UNION_ALLREDUCE,)
    shared_state = (keys.THRESHOLD,)

    def __init__(
        self,
        layout: Layout,
        world_size: int,
        rank: int,
        density: float,
        threshold: float | None = None,
        comparison: str = "released",
        **knobs,
    ) -> None:
        super().__init__(layout, world_size, rank, density=density, **knobs)
        self.comparison = check_comparison(comparison)
        if threshold is not None and not _positive_number(threshold):
            raise ConfigError(
                f"sparsifier.threshold must be > 0, got {threshold}: set a positive lambda, or null for 1/(2 sqrt(k))"
            )
        # 1. Threshold (once).
        self.threshold = initial_threshold(self.k) if threshold is None else float(threshold)
        self.threshold_source = "1/(2 sqrt(k))" if threshold is None else "sparsifier.threshold"
        self._scan = ThresholdScan(comparison=self.comparison)

    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> torch.Tensor:
        # 2. Selection: one comparison pass over the whole vector.
        return self._scan.select(acc, self.threshold, 0)

    def metrics(self) -> dict[str, float | list[float]]:
        return {keys.THRESHOLD: self.threshold}

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "threshold": self.threshold,
            "threshold_source": self.threshold_source,
            "comparison": self.comparison,
        }
