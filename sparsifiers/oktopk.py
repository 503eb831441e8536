"""Ok-Topk (Li and Hoefler, PPoPP 2022) as the released code runs it for its LSTM (Shigangli/Ok-Topk,
LSTM/allreducer.py `AllReducer.run`, branch 'oktopk', with its GaussianCompressor helpers): local
thresholds, a sparse reduce-scatter over W regions, the owners' global threshold, an all-gather.

t counts steps from 0; k = floor(d N); every "|x| > th" is strict, in float32. The thresholds are
Python floats (float64), as the released code keeps them (`ratio2threshold` returns a float, the
climb and the bands multiply and divide floats): only the comparison rounds them to float32.

    1. Warm-up, t < warmup_steps (128): a dense mean all-reduce; the residual stays empty.
    2. Local threshold th_loc (this rank's). On a recompute step, (t - warmup_steps) % tau == 0
       (tau = threshold_every, 32): the k-th largest |acc|. Otherwise the stored th_loc, raised
       x1.03 while more than floor(3k/2) |acc| exceed it, at most 5 times.
    3. Selection: S_r = {p : |acc_p| > th_loc}, ascending. Then the stored th_loc (next step's
       start) is scaled by the band: /1.012 if |S_r| < 0.75k, x1.012 if |S_r| > 1.25k.
    4. Regions, when (t - warmup_steps) % regions_every == 0 (64): each rank proposes
       b_i = S_r[i c], c = floor(|S_r| / W), i = 1..W-1; B_i = floor(sum_r b_i / W) (an int64
       all-reduce); region j = [B_j, B_j+1), B_0 = 0, B_W = N; kept until the next repartition.
    5. Sparse reduce-scatter (experiments/engine/core/exchange/regions.py): the W x W pair counts by
       all-to-all, then S_r's (index, value) pairs in region j go to rank j, in rounds
       s = 1..W-1 (rank r to r + s mod W). The owner sums its region, sources in the released
       order r, r-1, ..., r-W+1 (mod W).
    6. Owners' selection and all-gather. On a recompute step each owner sends every non-zero sum;
       every rank keeps the k'' = min(gathered, k) largest |sum| (ties: the lower index) and sets
       th_glob to the k''-th magnitude. Otherwise an owner sends |sum| > th_glob, all of it is
       the aggregate, and th_glob is scaled: /1.01 below 0.75k gathered, x1.008 above 1.25k.
       agg = the kept sums / W.
    7. Error feedback: rank r zeroes its residual on S_r intersected with the aggregate's
       coordinates; everything else, a pair its owner dropped included, stays. On a recompute
       step the intersection is the released lookup (`searchsorted_matches`: a binary search in
       the top-k ordered by magnitude, which misses most matches) unless
       recompute_residual=intersection.

variant=paper is the paper's algorithm instead, the one its 6k(W-1)/W bound assumes: steps 2-3
select exactly the k largest |acc|; step 6 keeps exactly the k largest |sum| of all regions
(experiments/engine/core/exchange/regions.py `_global_top_k`) and balances the kept pairs to about k/W a
rank before the all-gather (`_balanced`); step 7 is the intersection.

Where sparsebench departs from the released code (docs/algorithms.md, "oktopk"): the schedule
counts from the end of the warm-up (the same steps for the released constants); indices are
int32 in one packed message per peer and round; a rank that selected nothing proposes even
regions, an empty gather keeps th_glob, W = 1 works (one region: no messages).
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
from sparsifiers.common.kernels import AtLeastSelector, ExactTopK, count_at_least
from sparsifiers.common.layout import Layout
from sparsifiers.common.threshold_control import strict_cut

# The released LSTM constants (lstm_oktopk.sh, allreducer.py).
RAISE, RAISE_LIMIT = 1.03, 5  # the local threshold's climb while more than 3k/2 exceed it
LOCAL_BAND = 1.012  # the stored local threshold's step out of [0.75k, 1.25k]
GLOBAL_DOWN, GLOBAL_UP = 1.01, 1.008  # the global threshold's steps below 0.75k / above 1.25k
BAND = (0.75, 1.25)
RESIDUAL_LOOKUPS = ("released", "intersection")  # the recompute steps' residual (step 7)
VARIANTS = ("released", "paper")  # the released LSTM code, or the paper's algorithm (docs/algorithms.md)


def scaled(threshold: float, factor: float, divide: bool = False) -> float:
    """threshold * factor (or / factor) as the released code computes it: Python floats (float64),
    never rounded here; only a comparison with a float32 tensor rounds it (`strict_cut`)."""
    return threshold / factor if divide else threshold * factor


def proposed_cuts(selection: torch.Tensor, world_size: int, numel: int) -> torch.Tensor:
    """Step 4, one rank's proposal: b_i = S[i c], c = floor(|S| / W), i = 1..W-1 (int64). A rank
    that selected nothing proposes the even split floor(i N / W) (the released code fails)."""
    inner = torch.arange(1, world_size, dtype=torch.int64, device=selection.device)
    if selection.numel() == 0:
        return inner * numel // world_size
    return selection[inner * (selection.numel() // world_size)].to(torch.int64)


def searchsorted_matches(selection: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    """The released `intersect1d_searchsorted(S_r, kept)`: numpy's binary search of each position
    of S_r (ascending) in `kept` as it is ordered, a search past the end pointed at kept[0], and
    the position kept where kept[found] equals it. With `kept` ordered by magnitude (a recompute
    step's top-k) the search misses most matches: those values stay in the residual. numpy's
    search, on the host, is the released one bit for bit (its bounds carry over from one key to
    the next), which an unsorted array makes part of the result."""
    if kept.numel() == 0 or selection.numel() == 0:
        return selection[:0]
    positions, order = selection.cpu().numpy().astype(np.int64), kept.cpu().numpy().astype(np.int64)
    found = np.searchsorted(order, positions)
    found[found == len(order)] = 0
    return selection[torch.from_numpy(order[found] == positions).to(selection.device)]


class OkTopK(Sparsifier):
    """Ok-Topk: threshold selection, a sparse reduce-scatter to region owners, an all-gather."""

    name = "oktopk"
    scope = SelectionScope.WHOLE
    exchanges = (ExchangeKind.SPARSE_REDUCE_SCATTER,)
    shared_state = (keys.GLOBAL_THRESHOLD, keys.REGION_BOUNDARIES)

    def __init__(self, layout: Layout, world_size: int, rank: int, density: float, warmup_steps: int = 128,
                 threshold_every: int = 32, regions_every: int = 64, recompute_residual: str = "released",
                 variant: str = "released", **knobs) -> None:
        super().__init__(layout, world_size, rank, density=density, **knobs)
        if recompute_residual not in RESIDUAL_LOOKUPS:
            raise ConfigError(f"sparsifier.recompute_residual={recompute_residual!r}: one of {', '.join(RESIDUAL_LOOKUPS)} "
                              "(released: the search in the magnitude-ordered top-k, which misses matches; "
                              "intersection: every match zeroed)")
        self.recompute_residual = recompute_residual
        if variant not in VARIANTS:
            raise ConfigError(f"sparsifier.variant={variant!r}: one of {', '.join(VARIANTS)} (released: the LSTM code's "
                              "thresholds; paper: exactly k selected and kept, and the data balancing before the all-gather)")
        self.variant = variant
        for key, value, least in (("warmup_steps", warmup_steps, 0), ("threshold_every", threshold_every, 1),
                                  ("regions_every", regions_every, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ConfigError(f"sparsifier.{key}={value!r}: an integer >= {least} (released: "
                                  f"warmup_steps=128, threshold_every=32, regions_every=64)")
        self.warmup_steps, self.threshold_every, self.regions_every = warmup_steps, threshold_every, regions_every
        self.local_threshold = 0.0  # th_loc: set by the first recompute step
        self.global_threshold = 0.0  # th_glob: identical on every rank
        self._boundaries = torch.tensor([0] + [self.numel] * world_size, dtype=torch.int64)  # until the first repartition
        self._used_threshold = math.nan  # what the last select used (metrics)
        self._warm = warmup_steps > 0  # the step select last saw was a warm-up step
        self._selector = AtLeastSelector()
        self._top_k = ExactTopK()

    # -- the schedule ----------------------------------------------------------------------------
    def warming_up(self, step: int) -> bool:
        return step < self.warmup_steps

    def _due(self, step: int, every: int) -> bool:
        return not self.warming_up(step) and (step - self.warmup_steps) % every == 0

    def recomputes(self, step: int) -> bool:
        """Steps 2 and 6: the exact thresholds are recomputed (the first sparse step always)."""
        return self._due(step, self.threshold_every)

    @property
    def current_density(self) -> float:
        return 1.0 if self._warm else self.density

    @property
    def current_k(self) -> int:
        return self.numel if self._warm else self.k

    # -- selection (steps 2 and 3) ---------------------------------------------------------------
    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> torch.Tensor | None:
        self._warm = self.warming_up(step)
        if self._warm:
            return None  # step 1: every coordinate, a dense all-reduce
        if self.variant == "paper":  # the paper's step: exactly the k largest |acc| (ties: the lower index)
            selection = self._top_k(acc, self.k).clone()
            self.local_threshold = self._used_threshold = float(acc[selection].abs().min())
            return selection
        if self.recomputes(step):
            self.local_threshold = float(torch.topk(acc.abs(), self.k, sorted=False).values.min())
        else:
            for _ in range(RAISE_LIMIT):
                if count_at_least(acc, strict_cut(self.local_threshold, acc.dtype)) <= 3 * self.k // 2:
                    break
                self.local_threshold = scaled(self.local_threshold, RAISE)
        self._used_threshold = self.local_threshold
        selection = self._selector(acc, strict_cut(self.local_threshold, acc.dtype), 0)
        if selection.numel() < BAND[0] * self.k:
            self.local_threshold = scaled(self.local_threshold, LOCAL_BAND, divide=True)
        elif selection.numel() > BAND[1] * self.k:
            self.local_threshold = scaled(self.local_threshold, LOCAL_BAND)
        return selection

    # -- the region exchange (steps 4 and 6) -----------------------------------------------------
    def regions_due(self, step: int) -> bool:
        return self._due(step, self.regions_every)

    def region_cuts(self, selection: torch.Tensor) -> torch.Tensor:
        return proposed_cuts(selection, self.world_size, self.numel)

    def set_regions(self, cut_sums: torch.Tensor) -> None:
        inner = torch.div(cut_sums.to(torch.int64), self.world_size, rounding_mode="floor")
        self._boundaries = torch.cat([torch.zeros(1, dtype=torch.int64), inner.cpu(),
                                      torch.tensor([self.numel], dtype=torch.int64)])

    @property
    def region_boundaries(self) -> torch.Tensor:
        return self._boundaries

    def owner_threshold(self, step: int) -> float | None:
        return None if self.recomputes(step) else self.global_threshold

    @property
    def balanced(self) -> bool:
        """The paper's variant: the owners keep exactly the k largest |sum| of all regions (found by
        a count search, docs/algorithms.md) and rebalance them to about k / W a rank before the
        all-gather."""
        return self.variant == "paper"

    def owners_kept(self, step: int, gathered: int, kth_magnitude: float | None) -> None:
        if self.balanced:
            if kth_magnitude is not None:
                self.global_threshold = kth_magnitude
        elif self.recomputes(step):
            if kth_magnitude is not None:  # nothing gathered: the released code fails; keep th_glob
                self.global_threshold = kth_magnitude
        elif gathered < BAND[0] * self.k:
            self.global_threshold = scaled(self.global_threshold, GLOBAL_DOWN, divide=True)
        elif gathered > BAND[1] * self.k:
            self.global_threshold = scaled(self.global_threshold, GLOBAL_UP)

    def residual_matches(self, selection: torch.Tensor, kept: torch.Tensor, step: int) -> torch.Tensor | None:
        """Step 7: on a recompute step, as released, what `searchsorted_matches` finds of S_r in the
        top-k ordered by magnitude; otherwise (or with recompute_residual=intersection) None: the
        exact intersection."""
        if self.recompute_residual == "released" and self.recomputes(step) and not self.balanced:
            return searchsorted_matches(selection, kept)
        return None

    # -- state ---------------------------------------------------------------------------------
    def metrics(self) -> dict[str, float | list[float]]:
        return {keys.THRESHOLD: self._used_threshold, keys.GLOBAL_THRESHOLD: self.global_threshold,
                keys.REGION_BOUNDARIES: [float(b) for b in self._boundaries]}

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "warmup_steps": self.warmup_steps, "threshold_every": self.threshold_every,
                "regions_every": self.regions_every, "recompute_residual": self.recompute_residual, "variant": self.variant}

    def state_dict(self) -> dict[str, Any]:
        return {"local_threshold": self.local_threshold, "global_threshold": self.global_threshold,
                "boundaries": self._boundaries.tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.local_threshold = float(state["local_threshold"])
        self.global_threshold = float(state["global_threshold"])
        self._boundaries = torch.tensor(state["boundaries"], dtype=torch.int64)
