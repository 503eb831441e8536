"""SAGE: threshold selection with an on-the-fly scaled threshold (Sahu et al.'s earlier scaler).

Every rank selects over the whole vector with its own lambda, rescaled each step from a small
random sample of its own accumulator:

    1. Sample size (once): s = int(N / (1 + N e^2)) (Slovin's formula, e = `sample_error` = 0.05).
    2. t = 0: the sample's mean |acc| is recorded; lambda = 1 / (2 sqrt(k)).
    3. t >= 1: alpha = sample mean now / sample mean before;
       d_exam = fraction of |acc| >= lambda * alpha; beta = 2 / (1 + exp(d - d_exam));
       gamma = 0.95 if d_exam / d < 0.1, 1.05 if d_exam / d > 10, else 1;
       lambda <- lambda * alpha * beta * gamma.
    4. Selection: every index with |acc| >= lambda, over the whole vector.
    5. Exchange: union_allreduce (ranks overlap: build-up occurs).

Both comparisons with a threshold (d_exam's count in step 3, the selection in step 4) follow
`comparison`: released (lambda rounded to the nearest float32, as the released code compares) or
exact (threshold_control.py). The sample of steps 2 and 3 compares nothing.

Steps 2 and 3 read the rank's own accumulator, so unlike MiCRO's, SAGE's lambda is per rank by
definition and is updated in `select`, not from the exchange's feedback. The sample is drawn from
this rank's own generator (seeded from the run seed and the rank), never from the training RNG;
sample means are exact sums (math.fsum), so runs repeat bit for bit. When either sample mean is 0
the ratio alpha is undefined and is taken as 1.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from experiments.runformat import metric_keys as keys
from experiments.runformat.errors import ConfigError
from sparsifiers.common.base import SelectionScope, Sparsifier
from sparsifiers.common.exchange_kinds import ExchangeKind
from sparsifiers.common.layout import Layout
from sparsifiers.common.threshold_control import ThresholdScan, check_comparison, initial_threshold

SAMPLE_STREAM = 0x5A6E  # separates SAGE's sampling stream from every other seeded stream


def sample_seed(seed: int, rank: int) -> int:
    """The seed of rank `rank`'s sampling generator in a run seeded with `seed`."""
    return int(np.random.SeedSequence([seed, SAMPLE_STREAM, rank]).generate_state(1)[0])


class Sage(Sparsifier):
    """SAGE with error feedback: a per-rank threshold rescaled from sampled magnitudes."""

    name = "sage"
    scope = SelectionScope.WHOLE
    exchanges = (ExchangeKind.UNION_ALLREDUCE,)

    def __init__(
        self,
        layout: Layout,
        world_size: int,
        rank: int,
        density: float,
        sample_error: float = 0.05,
        comparison: str = "released",
        **knobs,
    ) -> None:
        super().__init__(layout, world_size, rank, density=density, **knobs)
        self.comparison = check_comparison(comparison)
        number = isinstance(sample_error, (int, float)) and not isinstance(sample_error, bool)
        if not number or not 0.0 < sample_error < 1.0:
            raise ConfigError(f"sparsifier.sample_error must be in (0, 1), got {sample_error}: e.g. 0.05")
        # 1. Sample size (once), at least one element.
        self.sample_error = float(sample_error)
        self.sample_size = max(1, int(self.numel / (1 + self.numel * self.sample_error * self.sample_error)))
        self.threshold = initial_threshold(self.k)
        self._previous_mean: float | None = None  # None until the first step has been sampled
        self._generator = torch.Generator().manual_seed(sample_seed(self.seed, rank))
        self._factors = {"alpha": 1.0, "beta": 1.0, "gamma": 1.0, "d_exam": math.nan}  # last step's, for metrics
        # Counting and selection both go through one scan: one comparison rule.
        self._scan = ThresholdScan(comparison=self.comparison)

    def _sample_mean(self, acc: torch.Tensor) -> float:
        """Mean |acc| over s indices drawn uniformly (with replacement) from this rank's generator."""
        positions = torch.randint(0, self.numel, (self.sample_size,), generator=self._generator)
        magnitudes = acc[positions.to(acc.device)].abs().tolist()
        return math.fsum(magnitudes) / self.sample_size

    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> torch.Tensor:
        mean_now = self._sample_mean(acc)
        self._scan.load(acc)
        if self._previous_mean is not None:
            # 3. Rescale lambda (t >= 1).
            undefined = self._previous_mean == 0.0 or mean_now == 0.0
            alpha = 1.0 if undefined else mean_now / self._previous_mean
            d_exam = self._scan.count(self.threshold * alpha) / self.numel
            beta = 2.0 / (1.0 + math.exp(self.density - d_exam))
            ratio = d_exam / self.density
            gamma = 0.95 if ratio < 0.1 else 1.05 if ratio > 10.0 else 1.0
            self.threshold = self.threshold * alpha * beta * gamma
            self._factors = {"alpha": alpha, "beta": beta, "gamma": gamma, "d_exam": d_exam}
        # 2. At t = 0 lambda keeps its initial value; at every t the sample mean is the next alpha's base.
        self._previous_mean = mean_now
        # 4. Selection over the whole vector.
        self._scan.mark(self.threshold)
        return self._scan.indices(0)

    def metrics(self) -> dict[str, float | list[float]]:
        return {keys.THRESHOLD: self.threshold, **{keys.sparsifier_key(k): v for k, v in self._factors.items()}}

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "sample_size": self.sample_size,
            "comparison": self.comparison,
            "initial_threshold": initial_threshold(self.k),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "previous_mean": self._previous_mean,
            "generator": self._generator.get_state(),
            "factors": dict(self._factors),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if set(state) != {"threshold", "previous_mean", "generator", "factors"}:
            raise ValueError(f"sage state needs threshold, previous_mean, generator, factors; got {sorted(state)}")
        self.threshold = float(state["threshold"])
        previous = state["previous_mean"]
        self._previous_mean = None if previous is None else float(previous)
        self._generator.set_state(state["generator"])
        self._factors = {key: float(value) for key, value in state["factors"].items()}
