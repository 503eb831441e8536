"""|x| >= cut over a contiguous slice: the scan of MiCRO, ExDyna, hard threshold, SAGE and
Gaussian-k. `cut` is already in the comparison's terms (threshold_control.cutoff): the slice is
compared with it in the slice's dtype, as torch compares a tensor with a Python float.

Reference (torch): |x| into a scratch buffer, `ge` into a scratch mask, `nonzero`.
Compiled: one read of the slice (compiled.py).
"""
from __future__ import annotations

import numpy as np
import torch

from sparsifiers.common.kernels.backend import use_compiled
from sparsifiers.common.workspace import scratch


def _cut_in_dtype(cut: float, dtype: torch.dtype):
    """`cut` as the numpy scalar of the tensor's dtype the kernel compares with: rounded to
    nearest, as torch rounds a Python scalar compared with a float32 tensor."""
    return np.float32(cut) if dtype == torch.float32 else np.float64(cut)


def count_at_least_reference(values: torch.Tensor, cut: float) -> int:
    magnitude = torch.abs(values, out=scratch("magnitude", values.numel(), values.dtype, values.device))
    mask = torch.ge(magnitude, cut, out=scratch("mask", values.numel(), torch.bool, values.device))
    return int(torch.count_nonzero(mask))


def select_at_least_reference(values: torch.Tensor, cut: float, offset: int) -> torch.Tensor:
    magnitude = torch.abs(values, out=scratch("magnitude", values.numel(), values.dtype, values.device))
    mask = torch.ge(magnitude, cut, out=scratch("mask", values.numel(), torch.bool, values.device))
    return torch.nonzero(mask).view(-1).add_(offset)


def count_at_least(values: torch.Tensor, cut: float) -> int:
    """How many |values| >= cut."""
    if not use_compiled(values):
        return count_at_least_reference(values, cut)
    from sparsifiers.common.kernels import compiled

    return int(compiled.count_at_least(values.numpy(), _cut_in_dtype(cut, values.dtype)))


class AtLeastSelector:
    """Indices offset + i of every |values[i]| >= cut, increasing, as int64: into a buffer this
    object owns (grown by half when a selection outgrows it, never shrunk), so the compiled path
    allocates nothing per call. The result is a view, valid until the next call."""

    def __init__(self) -> None:
        self._buffer = torch.empty(0, dtype=torch.int64)

    def __call__(self, values: torch.Tensor, cut: float, offset: int) -> torch.Tensor:
        if not use_compiled(values):
            return select_at_least_reference(values, cut, offset)
        from sparsifiers.common.kernels import compiled

        typed_cut = _cut_in_dtype(cut, values.dtype)
        array = values.numpy()
        count = compiled.select_at_least(array, typed_cut, offset, self._buffer.numpy())
        if count > self._buffer.numel():
            self._buffer = torch.empty(max(count, self._buffer.numel() * 3 // 2), dtype=torch.int64)
            compiled.select_at_least(array, typed_cut, offset, self._buffer.numpy())
        return self._buffer[:count]
