"""The union of every rank's selection, sorted and distinct: what union_allreduce aggregates.

Rows are the all-gathered index lists, `rows[r, :counts[r]]` valid (the rest is padding).
Reference (torch): concatenate and `torch.unique` (a sort of all W x |S| indices).
Compiled: a bitmap with one bit per coordinate (N / 8 bytes), marked and read back in order; no
sort, and disjoint selections (DEFT, MiCRO, ExDyna) cost no more than overlapping ones.
"""
from __future__ import annotations

import numpy as np
import torch

from sparsifiers.common.kernels.backend import use_compiled
from sparsifiers.common.workspace import scratch


def sorted_union_reference(rows: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    # One mask over all the rows (not a slice per rank: W host reads of counts[r] on a GPU).
    valid = torch.arange(rows.shape[1], device=rows.device) < counts.to(rows.device)[:, None]
    return torch.unique(rows[valid].long())


def sorted_union(rows: torch.Tensor, counts: torch.Tensor, numel: int) -> torch.Tensor:
    """Sorted distinct int64 indices in rows[r, :counts[r]] over every r; indices < numel."""
    if rows.numel() == 0 or not use_compiled(rows):
        return sorted_union_reference(rows, counts)
    from sparsifiers.common.kernels import compiled

    words = scratch("union_bitmap", (numel + 63) // 64, torch.int64, rows.device)
    out = torch.empty(min(int(counts.sum()), numel), dtype=torch.int64)  # |U| <= N however much ranks overlap
    count = compiled.sorted_union(rows.numpy(), counts.numpy(), words.numpy().view(np.uint64), out.numpy())
    return out[:count]
