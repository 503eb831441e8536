"""Exact top-k of |x|, with a defined answer when magnitudes tie: the k largest, ties at the k-th
magnitude broken by lower index, NaN ranked as +inf; indices returned increasing. (torch.topk
alone leaves the choice among ties unspecified.)

Reference (torch): torch.topk finds the k-th magnitude v; every index above v is kept, then the
lowest-index ones equal to v until there are k.

Compiled, a candidate filter (compiled.py):
    1. a cut from an evenly spaced sample of m magnitudes (one in 128, 256 to 16,384): the
       sample's r-th largest, r about twice the m k / n the sample holds above the true k-th
       magnitude (plus a margin);
    2. one pass gathers the candidates, |x| > cut (and NaN);
    3. if there are at least k, the top-k of the candidates is the top-k of x: the k-th magnitude
       v of x is then > cut, so every element >= v, ties included, is a candidate, and the same
       rule picks the same ones;
    4. otherwise retry with a lower cut (the sample's 8 r-th largest), then with every element a
       candidate, which is always enough. The answer never depends on the sample: only the time.
       Inputs under 2,048 elements skip the sample: every element is a candidate.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from sparsifiers.common.kernels.backend import use_compiled
from sparsifiers.common.workspace import scratch

SAMPLE = 16384  # the most magnitudes sampled for the cut: a small fraction of a copy's time at N = 11M
MIN_SAMPLE = 256  # fewer would make the cut too coarse to be worth a pass
EVERYTHING = -1.0  # a cut below every magnitude: every element is a candidate (|x| > -1)


def exact_topk_reference(values: torch.Tensor, k: int) -> torch.Tensor:
    magnitude = torch.abs(values, out=scratch("magnitude", values.numel(), values.dtype, values.device))
    magnitude.nan_to_num_(nan=math.inf, posinf=math.inf)
    top = torch.topk(magnitude, k, sorted=False)
    kth = top.values.min()
    if int(torch.count_nonzero(magnitude >= kth)) == k:  # no tie at the k-th magnitude: torch.topk's set
        return top.indices.sort().values
    above = torch.nonzero(magnitude > kth).view(-1)
    at = torch.nonzero(magnitude == kth).view(-1)[: k - above.numel()]
    return torch.cat([above, at]).sort().values


def sample_size(n: int) -> int:
    """Magnitudes sampled from n elements: one in 128, within [MIN_SAMPLE, SAMPLE]; 0 (no
    sample: every element is a candidate) below 8 x MIN_SAMPLE, where a pass costs little."""
    return 0 if n < 8 * MIN_SAMPLE else min(SAMPLE, max(MIN_SAMPLE, n // 128))


def _sample_ranks(n: int, k: int, m: int) -> list[int]:
    """Sample ranks to try as cuts, in order: about twice the expected count above the k-th
    magnitude plus three standard deviations, then eight times that."""
    expected = m * k / n
    first = math.ceil(2 * expected + 3 * math.sqrt(expected) + 2)
    return [rank for rank in (first, 8 * first) if rank <= m]


class ExactTopK:
    """Top-k of |x| into buffers owned by this object: the compiled path allocates nothing of the
    input's size per call (candidate buffers grow by half when outgrown). The result is a view,
    valid until the next call."""

    def __init__(self) -> None:
        self._out = torch.empty(0, dtype=torch.int64)
        self._positions = torch.empty(0, dtype=torch.int64)
        self._magnitudes = torch.empty(0, dtype=torch.float64)
        self._sample = np.empty(0)

    def __call__(self, values: torch.Tensor, k: int, offset: int = 0, out: torch.Tensor | None = None) -> torch.Tensor:
        """Global indices offset + i of the top-k |values[i]|, increasing (1 <= k <= numel), into
        `out` (k int64) when given, else into a buffer of this object (valid until the next call)."""
        n = values.numel()
        if not 1 <= k <= n:
            raise ValueError(f"top-k needs 1 <= k <= {n}, got k = {k}")
        if not use_compiled(values) or 4 * k >= n:
            # A dense top-k gains nothing from a filter: the reference is as fast.
            selected = exact_topk_reference(values, k)
            if offset:
                selected.add_(offset)
            return selected if out is None else out.copy_(selected)
        from sparsifiers.common.kernels import compiled

        if out is None:
            if self._out.numel() < k:
                self._out = torch.empty(k, dtype=torch.int64)
            out = self._out[:k]
        array, destination = values.numpy(), out.numpy()
        if self._magnitudes.dtype != values.dtype:
            self._magnitudes = torch.empty(self._positions.numel(), dtype=values.dtype)
        for cut in self._cuts(array, n, k, compiled):
            cut = array.dtype.type(cut)
            count = compiled.topk_at_cut(array, cut, k, offset, self._positions.numpy(), self._magnitudes.numpy(), destination)
            if k <= count and count > self._positions.numel():  # below k the cut fails anyway: no regrowth
                capacity = max(count, self._positions.numel() * 3 // 2)
                self._positions = torch.empty(capacity, dtype=torch.int64)
                self._magnitudes = torch.empty(capacity, dtype=values.dtype)
                compiled.topk_at_cut(array, cut, k, offset, self._positions.numpy(), self._magnitudes.numpy(), destination)
            if count >= k:
                return out
        raise AssertionError("every element is a candidate, so there are at least k")  # pragma: no cover

    def _cuts(self, array: np.ndarray, n: int, k: int, compiled):
        """The cuts to try, lazily (each costs a partition of the sample): from the sample when
        the input is large enough to sample, always ending with EVERYTHING."""
        size = sample_size(n)
        if size:
            if self._sample.shape[0] != size or self._sample.dtype != array.dtype:
                self._sample = np.empty(size, dtype=array.dtype)
            compiled.sample_magnitudes(array, self._sample)
            for rank in _sample_ranks(n, k, size):
                yield compiled.kth_largest(self._sample, rank)
        yield EVERYTHING
