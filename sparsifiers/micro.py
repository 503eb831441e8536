"""MiCRO: Minimizing Compression Ratio Error on-the-fly (arXiv 2310.00967).

The ranks split the vector, so their selections are disjoint (no build-up), and each rank scans
only its N / W share with one comparison pass. One global threshold, steered by the previous
step's aggregated count, keeps the actual density near d.

    1. Partitions (once): N split into W contiguous parts, sizes differing by at most one.
    2. Assignment (every step): rank r takes partition (t + r) mod W.
    3. Threshold: lambda = 1 / (2 sqrt(k)) at t = 0; after every step lambda is scaled by MiCRO's
       rule on rho = |U| / k (threshold_control.py; `threshold_rule` official or symmetric).
       `threshold_start: calibrated` (not the released code) starts instead at the mean over
       ranks of each rank's k-th largest |acc| at t = 0, through the averaged inputs
       (threshold_start.py: why that estimate makes |U| ~ k, and its cost).
    4. Selection: |acc| >= lambda inside the rank's partition; if none, the single index
       partition start + (t mod partition size). `comparison`: released (lambda rounded to the
       nearest float32, as the released code compares) or exact (threshold_control.py).
    5. Exchange: union_allreduce (disjoint, no dedup). |U| comes back through `observe` and feeds
       step 3 identically on every rank, so lambda is bit-identical everywhere.

W = 1: the one partition is the whole vector. The released code records the aggregated count only
when W > 1, so with one worker its rho stays at 1 / k and lambda only shrinks. Here |U| comes from
the exchange for every W, so one worker runs plain threshold selection under MiCRO's density
control, and its density tracks d as it does for W > 1.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from experiments.runformat import metric_keys as keys
from experiments.runformat.errors import ConfigError
from sparsifiers.common.base import SelectionScope, Sparsifier
from sparsifiers.common.exchange_kinds import ExchangeKind, Feedback
from sparsifiers.common.layout import Layout, even_splits
from sparsifiers.common.threshold_control import ThresholdScan, check_comparison, check_threshold_rule, next_threshold
from sparsifiers.common.threshold_start import ThresholdStart


class Micro(Sparsifier):
    """MiCRO with error feedback: rotating static partitions, one adaptive global threshold."""

    name = "micro"
    scope = SelectionScope.SPLIT
    exchanges = (ExchangeKind.UNION_ALLREDUCE,)
    shared_state = (keys.THRESHOLD,)

    def __init__(
        self,
        layout: Layout,
        world_size: int,
        rank: int,
        density: float,
        threshold_rule: str = "official",
        comparison: str = "released",
        threshold_start: str = "released",
        **knobs,
    ) -> None:
        super().__init__(layout, world_size, rank, density=density, **knobs)
        self.threshold_rule = check_threshold_rule(threshold_rule)
        self.comparison = check_comparison(comparison)
        self._start = ThresholdStart(threshold_start, self.k)
        self.threshold_start = threshold_start
        if self.numel < world_size:
            raise ConfigError(
                f"micro needs a gradient element per worker: N = {self.numel} < workers = {world_size}; lower workers"
            )
        # 1. Partitions (once).
        self.partitions = even_splits(self.numel, world_size)
        # 3. Threshold at t = 0 (what the next select uses): NaN until a calibrated start is known.
        self.threshold = math.nan if self._start.pending else self._start.initial
        self._used_threshold = math.nan  # what the last select used (metrics)
        self._scanned = 0
        self._scan = ThresholdScan(comparison=self.comparison)

    def partition_of(self, step: int) -> tuple[int, int]:
        """2. Assignment: the (start, end) this rank scans at `step`; a permutation over ranks."""
        return self.partitions[(step + self.rank) % self.world_size]

    # -- threshold_start=calibrated: the world averages the first step's k-th largest |acc| ----
    def averaged_inputs(self, acc: torch.Tensor, step: int) -> torch.Tensor | None:
        return self._start.contribution(acc)

    def receive_average(self, mean: torch.Tensor, step: int) -> None:
        self.threshold = self._start.calibrate(mean)

    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> torch.Tensor:
        if self._start.pending:
            raise RuntimeError("sparsifier.threshold_start=calibrated: the world did not average the first step's "
                               "k-th largest |acc| before select (averaged_inputs/receive_average were not called)")
        start, end = self.partition_of(step)
        # 4. Selection: one comparison pass over this rank's N / W elements.
        selected = self._scan.select(acc[start:end], self.threshold, start)
        if selected.numel() == 0:
            # As the released code does: one rotating index, so no rank ever sends an empty row.
            selected = torch.tensor([start + step % (end - start)], dtype=torch.int64, device=acc.device)
        self._used_threshold = self.threshold
        self._scanned = end - start
        return selected

    def observe(self, feedback: Feedback) -> None:
        # 3. Threshold for the next step from this step's |U|, which every rank knows.
        self.threshold = next_threshold(self.threshold, feedback.aggregated, self.k, self.threshold_rule)

    def metrics(self) -> dict[str, float | list[float]]:
        return {keys.THRESHOLD: self._used_threshold, keys.SCANNED: float(self._scanned)}

    def describe(self) -> dict[str, Any]:
        described = super().describe()
        return {
            **described,
            "threshold_rule": self.threshold_rule,
            "comparison": self.comparison,
            **self._start.describe(),
        }

    def state_dict(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "used_threshold": self._used_threshold, "scanned": self._scanned,
                **self._start.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        start_keys = set(self._start.state_dict())
        needed = {"threshold", "used_threshold", "scanned"} | start_keys
        if set(state) != needed:
            raise ValueError(f"micro state needs {', '.join(sorted(needed))}; got {sorted(state)}")
        self._start.load_state_dict({key: state[key] for key in start_keys})
        self.threshold = float(state["threshold"])
        self._used_threshold = float(state["used_threshold"])
        self._scanned = int(state["scanned"])
