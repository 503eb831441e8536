"""DGC: Deep Gradient Compression (Lin et al., ICLR 2018; docs/algorithms.md, "DGC").

In the order a step applies them:
    1. Local gradient clipping (precondition): g <- g * min(1, c / sqrt(W) / ||g||), on the whole
       flat gradient, before it is accumulated.
    2. Momentum correction (precondition): u = m * u + g, returned; the world adds it to the
       residual, so acc = v + u is the paper's accumulation v. The optimizer runs without
       momentum (`owns_momentum`).
    3. Warm-up (start_epoch): density 25%, 6.25%, 1.5625%, 0.4%, then the target, one stage per
       epoch. A stage sparser than the target runs at the target (as the released code's
       geometric schedule does): warm-up only ever adds density.
    4. Threshold by sampling (select): the top of a strided sample with a random start gives the
       threshold; |v| >= threshold are the candidates; while there are fewer than
       lower_bound * k_t, lower the threshold by lower_bound (at most max_retries times); if
       more than upper_bound * k_t, keep the exact top-k_t among the candidates.
    5. Exchange: sparse_allgather of (index, value); the world zeroes v at this rank's selection.
    6. Momentum factor masking (on_residual_zeroed): u = 0 where v was transmitted.

The selection runs over the whole flat vector (the released code works tensor by tensor), and
a count between k_t and upper_bound * k_t is kept whole (the released code then truncates to the
first k_t candidates by position, which docs/algorithms.md does not ask for).
"""
from __future__ import annotations

import math
import random
from typing import Any

import torch

from experiments.runformat import metric_keys as keys
from experiments.runformat.errors import require
from sparsifiers.common.base import SelectionScope, Sparsifier, target_count
from sparsifiers.common.exchange_kinds import ExchangeKind
from sparsifiers.common.layout import Layout
from sparsifiers.common.workspace import scratch, scratch_like

DEFAULT_WARMUP = (0.25, 0.0625, 0.015625, 0.004)
CLIP_EPS = 1e-6  # as torch.nn.utils.clip_grad_norm_: no division by zero for a zero gradient


class DGC(Sparsifier):
    """Momentum-corrected, clipped, warmed-up sparsification with a sampled threshold."""

    name = "dgc"
    scope = SelectionScope.WHOLE
    exchanges = (ExchangeKind.SPARSE_ALLGATHER,)
    owns_momentum = True
    shared_state = (keys.DGC_DENSITY,)  # the warm-up stage: identical on every rank by design

    def __init__(
        self,
        layout: Layout,
        world_size: int,
        rank: int,
        density: float,
        momentum: float = 0.9,
        clip_norm: float | None = None,
        warmup: bool = True,
        warmup_densities: list[float] | tuple[float, ...] = DEFAULT_WARMUP,
        sample_fraction: float = 0.01,
        max_retries: int = 10,
        upper_bound: float = 1.3,
        lower_bound: float = 0.8,
        **knobs,
    ) -> None:
        super().__init__(layout, world_size, rank, density=density, **knobs)
        require(0.0 <= momentum < 1.0, f"sparsifier.momentum must be in [0, 1), got {momentum}")
        require(
            clip_norm is None or clip_norm > 0,
            f"sparsifier.clip_norm must be > 0 or null (no clipping), got {clip_norm}",
        )
        require(isinstance(warmup, bool), f"sparsifier.warmup must be true or false, got {warmup}")
        require(
            isinstance(warmup_densities, (list, tuple))
            and all(isinstance(d, (int, float)) and 0.0 < d <= 1.0 for d in warmup_densities),
            f"sparsifier.warmup_densities must be a list of densities in (0, 1], got {warmup_densities}",
        )
        require(0.0 < sample_fraction <= 1.0, f"sparsifier.sample_fraction must be in (0, 1], got {sample_fraction}")
        require(
            isinstance(max_retries, int) and max_retries >= 0,
            f"sparsifier.max_retries must be an integer >= 0, got {max_retries}",
        )
        require(upper_bound >= 1.0, f"sparsifier.upper_bound must be >= 1 (e.g. 1.3), got {upper_bound}")
        require(0.0 < lower_bound < 1.0, f"sparsifier.lower_bound must be in (0, 1) (e.g. 0.8), got {lower_bound}")
        self.momentum = float(momentum)
        self.clip_norm = None if clip_norm is None else float(clip_norm)
        self.warmup = warmup
        self.warmup_densities = [float(d) for d in warmup_densities]
        self.sample_fraction = float(sample_fraction)
        self.max_retries = max_retries
        self.upper_bound = float(upper_bound)
        self.lower_bound = float(lower_bound)
        # Sampling offsets: one stream per rank, derived from the run's seed, apart from torch's RNG.
        self._rng = random.Random(f"dgc/{self.seed}/{rank}")
        self._epoch = 0
        self._velocity: torch.Tensor | None = None  # u
        self._clip_coef = 1.0
        self._threshold = float("nan")
        self._retries = 0

    # -- 3. warm-up ---------------------------------------------------------------------------
    def start_epoch(self, epoch: int, steps_per_epoch: int) -> None:
        self._epoch = epoch

    @property
    def current_density(self) -> float:
        """The density of the current warm-up stage (the target once warm-up is over)."""
        if self.warmup and self._epoch < len(self.warmup_densities):
            return max(self.warmup_densities[self._epoch], self.density)
        return self.density

    @property
    def current_k(self) -> int:
        return max(1, target_count(self.current_density, self.numel))

    # -- 1. clipping and 2. momentum correction -----------------------------------------------
    def precondition(self, grad: torch.Tensor) -> torch.Tensor:
        if self._velocity is None or self._velocity.shape != grad.shape:
            self._velocity = torch.zeros_like(grad)
        elif self._velocity.device != grad.device or self._velocity.dtype != grad.dtype:
            self._velocity = self._velocity.to(device=grad.device, dtype=grad.dtype)  # resumed elsewhere
        self._clip_coef = self._clip_coefficient(grad)
        return self._velocity.mul_(self.momentum).add_(grad, alpha=self._clip_coef)

    def _clip_coefficient(self, grad: torch.Tensor) -> float:
        """min(1, c W^-1/2 / ||g||): for uncorrelated rank gradients the sum of W clipped ones
        has norm about c, as one clip of the summed gradient would give (the paper's N^-1/2)."""
        if self.clip_norm is None:
            return 1.0
        max_norm = self.clip_norm / math.sqrt(self.world_size)
        return min(1.0, max_norm / (float(torch.linalg.vector_norm(grad)) + CLIP_EPS))

    # -- 4. threshold by sampling -------------------------------------------------------------
    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> torch.Tensor:
        k_now, density_now = self.current_k, self.current_density
        # Full-size temporaries live in the process's shared scratch (workspace.py): the hot
        # path allocates nothing full-size, and hosted ranks share one buffer of each.
        magnitude = torch.abs(acc, out=scratch_like("magnitude", acc))
        mask = scratch("mask", acc.numel(), torch.bool, acc.device)
        threshold = self._sampled_threshold(magnitude, density_now)
        for attempt in range(self.max_retries + 1):
            torch.ge(magnitude, threshold, out=mask)
            count = int(mask.sum())  # host sync: the retry decision needs the count
            if count >= self.lower_bound * k_now or attempt == self.max_retries:
                break
            threshold = threshold * self.lower_bound
        candidates = mask.nonzero().view(-1)
        if count > self.upper_bound * k_now:
            candidates = candidates[torch.topk(magnitude[candidates], k_now, sorted=False).indices]
        self._threshold, self._retries = float(threshold), attempt
        return candidates

    def _sampled_threshold(self, magnitude: torch.Tensor, density_now: float) -> torch.Tensor:
        """The smallest of the top ceil(s * density) of s strided samples. The sample holds at
        least 2 / density elements (the released code's floor), so its top holds at least two."""
        numel = self.numel
        wanted = min(numel, max(math.ceil(numel * self.sample_fraction), math.ceil(2 / density_now)))
        stride = numel // wanted
        samples = magnitude[self._rng.randrange(stride) :: stride]
        top = math.ceil(samples.numel() * density_now)
        return torch.topk(samples, top, sorted=False).values.min()

    # -- 6. momentum factor masking -----------------------------------------------------------
    def on_residual_zeroed(self, indices: torch.Tensor | None) -> None:
        if self._velocity is None:
            return
        if indices is None:
            self._velocity.zero_()
        else:
            self._velocity.index_fill_(0, indices.long(), 0.0)

    # -- method state -------------------------------------------------------------------------
    def metrics(self) -> dict[str, float | list[float]]:
        return {
            keys.THRESHOLD: self._threshold,
            keys.DGC_DENSITY: self.current_density,
            keys.DGC_RETRIES: float(self._retries),
            keys.DGC_CLIP_COEF: self._clip_coef,
        }

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "momentum": self.momentum,
            "clip_norm": self.clip_norm,
            "clip_norm_per_rank": None if self.clip_norm is None else self.clip_norm / math.sqrt(self.world_size),
            "warmup": self.warmup,
            "warmup_densities": list(self.warmup_densities),
            "warmup_floor": "target density",
            "sample_fraction": self.sample_fraction,
            "max_retries": self.max_retries,
            "upper_bound": self.upper_bound,
            "lower_bound": self.lower_bound,
            "selection_over": "whole vector",
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "velocity": None if self._velocity is None else self._velocity.detach().clone(),
            "epoch": self._epoch,
            "rng": self._rng.getstate(),
            "clip_coef": self._clip_coef,
            "threshold": self._threshold,
            "retries": self._retries,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        velocity = state["velocity"]
        self._velocity = None if velocity is None else velocity.detach().clone()
        self._epoch = int(state["epoch"])
        self._rng.setstate(state["rng"])
        self._clip_coef = float(state["clip_coef"])
        self._threshold = float(state["threshold"])
        self._retries = int(state["retries"])
