"""Top-k: each rank selects the k largest |acc| over the whole vector.

With `union_allreduce` the union of W selections holds between k and min(W*k, N) coordinates:
that growth is the gradient build-up the partition methods (DEFT, MiCRO, ExDyna) remove.
`sparse_allgather` sends (index, value) pairs instead, as GRACE and DGC do.
"""
from __future__ import annotations

import torch

from sparsifiers.base import ExchangeKind, SelectionScope, Sparsifier
from sparsifiers.layout import Layout
from sparsifiers.workspace import scratch_like


class TopK(Sparsifier):
    """Local top-k with error feedback."""

    name = "topk"
    scope = SelectionScope.WHOLE
    exchanges = (ExchangeKind.UNION_ALLREDUCE, ExchangeKind.SPARSE_ALLGATHER)

    def __init__(self, layout: Layout, world_size: int, rank: int, density: float, **knobs) -> None:
        super().__init__(layout, world_size, rank, density=density, **knobs)
        # Preallocated once: the hot path allocates no tensor per step. |acc| lives in the
        # process's shared scratch (workspace.py); the k-sized results are this rank's own.
        self._values = torch.empty(0)
        self._indices = torch.empty(0, dtype=torch.int64)

    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> torch.Tensor:
        if self._indices.numel() != self.k or self._indices.device != acc.device:
            self._values = torch.empty(self.k, dtype=acc.dtype, device=acc.device)
            self._indices = torch.empty(self.k, dtype=torch.int64, device=acc.device)
        magnitude = torch.abs(acc, out=scratch_like("magnitude", acc))
        torch.topk(magnitude, self.k, sorted=False, out=(self._values, self._indices))
        return self._indices
