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


class ExactTopK:
    """The k largest |acc|, into k-sized buffers allocated once: the hot path allocates nothing.
    |acc| lives in the process's shared scratch (workspace.py); the results are the owner's own
    and stay valid until the next call."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.values = torch.empty(0)
        self.indices = torch.empty(0, dtype=torch.int64)

    def __call__(self, acc: torch.Tensor) -> torch.Tensor:
        if self.indices.numel() != self.k or self.indices.device != acc.device:
            self.values = torch.empty(self.k, dtype=acc.dtype, device=acc.device)
            self.indices = torch.empty(self.k, dtype=torch.int64, device=acc.device)
        magnitude = torch.abs(acc, out=scratch_like("magnitude", acc))
        torch.topk(magnitude, self.k, sorted=False, out=(self.values, self.indices))
        return self.indices


class TopK(Sparsifier):
    """Local top-k with error feedback."""

    name = "topk"
    scope = SelectionScope.WHOLE
    exchanges = (ExchangeKind.UNION_ALLREDUCE, ExchangeKind.SPARSE_ALLGATHER)

    def __init__(self, layout: Layout, world_size: int, rank: int, density: float, **knobs) -> None:
        super().__init__(layout, world_size, rank, density=density, **knobs)
        self._top_k = ExactTopK(self.k)

    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> torch.Tensor:
        return self._top_k(acc)
