"""Compiles (or loads from numba's cache) every compiled kernel before the first step.

numba compiles a kernel on its first call: seconds on a machine that has never run it, a fraction
of a second to load from the cache after that. Without a warm-up that cost lands in step 0's
selection time; the run calls `warm_up` while it builds, before anything is timed.
"""
from __future__ import annotations

import torch

from sparsifiers.common.kernels.backend import use_compiled
from sparsifiers.common.kernels.threshold import AtLeastSelector, count_at_least
from sparsifiers.common.kernels.topk import ExactTopK
from sparsifiers.common.kernels.union import sorted_union


def warm_up(dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> bool:
    """Runs each kernel once on small inputs of `dtype` if the compiled path would take tensors
    of that dtype on `device`; returns whether it did."""
    values = torch.linspace(-1.0, 1.0, 20_000, dtype=dtype, device=device)
    if not use_compiled(values):
        return False
    AtLeastSelector()(values, 0.5, 0)
    count_at_least(values, 0.5)
    top = ExactTopK()
    top(values, 10)  # a sampled cut
    top(values[:100], 10)  # every element a candidate
    rows = torch.tensor([[0, 5, -1], [5, 7, 9]], dtype=torch.int32)
    sorted_union(rows, torch.tensor([2, 3]), 10)
    return True
