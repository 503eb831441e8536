"""Threshold machinery shared by the threshold sparsifiers.

Three pieces, so that no method file copies them:
- MiCRO's threshold rule (MiCRO step 3, reused unchanged by ExDyna step 4): lambda starts at
  1 / (2 sqrt(k)) and is multiplied every step by a factor chosen from rho = |U| / k, where |U| is
  the previous step's aggregated count. Two variants (docs/algorithms.md, MiCRO step 3):
    official   the released code: 1.005 if rho > 1.1; 1.00125 if rho > 0.909; else 0.995.
               Its middle band tests rho > 0 (always true) where 0.9987 was evidently meant,
               so any rho in (0.909, 1.1] raises lambda: lambda falls only at rho <= 0.909, and
               the density settles low (between 0.909 k and k, nearer k when counts are noisy).
    symmetric  the evident intent: 1.005 if rho > 1.1; 1.00125 if rho > 1;
               0.9987 if rho > 0.909; else 0.995.
  Thresholds are Python floats (float64) computed only from integers every rank knows, so they
  are bit-identical on every rank.
- How |x| is compared with lambda (`comparison`, docs/algorithms.md, "Common to the three partition
  methods"), a knob of MiCRO, ExDyna, hard threshold and SAGE:
    released  the released code: `acc.abs() >= lam`, lam a Python float. Torch compares in the
              tensor's dtype, so for float32 lambda is rounded to the *nearest* float32, and an
              |x| one ulp below lambda is selected when that rounding goes down.
    exact     |x| >= lambda in real numbers: lambda rounded *up* to the tensor's dtype.
  The two differ only for elements within one ulp of lambda, where lambda rounds down.
  (Gaussian-k, not a method of the released code, keeps the exact comparison, the scan's default.)
- `ThresholdScan`: the selection |x| >= lambda over a slice of the flat buffer, through the
  selection kernels (sparsifiers/common/kernels), allocating nothing of the slice's size per step.
"""
from __future__ import annotations

import math

import torch

from experiments.runformat.errors import ConfigError
from sparsifiers.common.kernels import AtLeastSelector, count_at_least

THRESHOLD_RULES = ("official", "symmetric")
COMPARISONS = ("released", "exact")


def check_threshold_rule(rule: str) -> str:
    """Returns `rule` if it is a known variant, else raises ConfigError naming the key."""
    if rule not in THRESHOLD_RULES:
        raise ConfigError(f"sparsifier.threshold_rule must be official or symmetric, got {rule}")
    return rule


def check_comparison(comparison: str) -> str:
    """Returns `comparison` if it is a known variant, else raises ConfigError naming the key."""
    if comparison not in COMPARISONS:
        raise ConfigError(
            f"sparsifier.comparison must be released or exact, got {comparison}: released compares |acc| with "
            f"lambda rounded to the nearest float32 (the authors' code), exact with lambda itself"
        )
    return comparison


def initial_threshold(k: int) -> float:
    """lambda at t = 0: 1 / (2 sqrt(k)), the MiCRO, ExDyna, Sahu et al. and SAGE starting point."""
    return 1.0 / (2.0 * math.sqrt(k))


def scale_factor(rho: float, rule: str) -> float:
    """The multiplier for lambda given rho = previous aggregated count / k."""
    if rho > 1.1:
        return 1.005
    if rule == "official":
        # The released code's middle band: its inner test is rho > 0, always true here.
        return 1.00125 if rho > 0.909 else 0.995
    if rho > 1.0:
        return 1.00125
    return 0.9987 if rho > 0.909 else 0.995


def next_threshold(threshold: float, aggregated: int, k: int, rule: str) -> float:
    """lambda for the next step from this step's aggregated count |U| (identical on all ranks)."""
    return threshold * scale_factor(aggregated / k, rule)


def exact_cutoff(threshold: float, dtype: torch.dtype) -> float:
    """The smallest value of `dtype` that is >= `threshold`.

    Comparing a float32 tensor with a Python float rounds the float to float32 (to nearest), which
    would select some |x| slightly below lambda. Rounding up instead makes `|x| >= cutoff` in the
    tensor's dtype mean exactly `|x| >= lambda` in real numbers, whatever the dtype."""
    if dtype == torch.float64 or math.isinf(threshold) or math.isnan(threshold):
        return threshold
    rounded = torch.tensor(threshold, dtype=torch.float64).to(dtype)
    if float(rounded) < threshold:
        rounded = torch.nextafter(rounded, torch.tensor(math.inf, dtype=dtype))
    return float(rounded)


def strict_cut(threshold: float, dtype: torch.dtype) -> float:
    """The cut c with `x >= c` exactly `x > threshold` for x of `dtype`, the threshold rounded to
    that dtype first (SIDCo's and Ok-Topk's released code compare float32 x with a float32
    threshold, strictly)."""
    if math.isnan(threshold):
        return math.nan
    rounded = torch.tensor(threshold, dtype=torch.float64).to(dtype)
    return float(torch.nextafter(rounded, torch.tensor(math.inf, dtype=dtype)))


def cutoff(threshold: float, dtype: torch.dtype, comparison: str) -> float:
    """The Python float a tensor of `dtype` is compared with (`|x| >= cutoff`) to apply lambda
    under `comparison`: released passes lambda itself, and torch rounds it to nearest as the
    released code's comparison does; exact passes `exact_cutoff`."""
    return threshold if comparison == "released" else exact_cutoff(threshold, dtype)


class ThresholdScan:
    """|x| >= lambda over a contiguous slice of the flat buffer, in O(slice) work.

    `load` names the slice; `count` and `select` compare it with thresholds through the
    selection kernels (sparsifiers/common/kernels: one read of the slice on the compiled path; |x|, a
    mask and `nonzero` in shared scratch on the torch path). The indices live in a buffer this
    scan owns, reused across steps.

    Every comparison of a scan (`mark`, `count`, `select`) follows its `comparison` (released or
    exact, see above), so a method that counts and selects with one scan applies one rule."""

    def __init__(self, comparison: str = "exact") -> None:
        self.comparison = check_comparison(comparison)
        self._values = torch.empty(0)
        self._marked: float | None = None
        self._selector = AtLeastSelector()

    def load(self, values: torch.Tensor) -> None:
        """Names the slice that `mark`, `count` and `indices` compare with thresholds."""
        self._values = values
        self._marked = None

    def _cutoff(self, threshold: float) -> float:
        return cutoff(threshold, self._values.dtype, self.comparison)

    def mark(self, threshold: float) -> None:
        """Chooses the threshold whose selection `indices` returns."""
        self._marked = threshold

    def count(self, threshold: float) -> int:
        """How many loaded |x| are >= threshold; marks it for `indices`."""
        self.mark(threshold)
        return count_at_least(self._values, self._cutoff(threshold))

    def indices(self, offset: int) -> torch.Tensor:
        """Global int64 indices of the loaded |x| >= the marked threshold: position in the slice
        + `offset`, increasing. A view of this scan's buffer, valid until its next selection."""
        if self._marked is None:
            raise RuntimeError("ThresholdScan.indices before mark or count")
        return self._selector(self._values, self._cutoff(self._marked), offset)

    def select(self, values: torch.Tensor, threshold: float, offset: int) -> torch.Tensor:
        """Global indices offset + i of every |values[i]| >= threshold, increasing."""
        self.load(values)
        self.mark(threshold)
        return self.indices(offset)
