"""Top-k: each rank selects the k largest |acc| over the whole vector.

With `union_allreduce` the union of W selections holds between k and min(W*k, N) coordinates:
that growth is the gradient build-up the partition methods (DEFT, MiCRO, ExDyna) remove.
`sparse_allgather` sends (index, value) pairs instead, as GRACE and DGC do.

Every rank selects exactly k = floor(density * N) (<= N, so always k), which every rank knows:
either exchange goes without its size header (`known_counts`).

The top-k is exact, with ties at the k-th magnitude broken by lower index (sparsifiers/common/kernels/topk.py).
"""
from __future__ import annotations

import torch

from sparsifiers.common.base import SelectionScope, Sparsifier
from sparsifiers.common.exchange_kinds import ExchangeKind
from sparsifiers.common.kernels import ExactTopK
from sparsifiers.common.layout import Layout


class TopK(Sparsifier):
    """Local top-k with error feedback."""

    name = "topk"
    scope = SelectionScope.WHOLE
    exchanges = (ExchangeKind.UNION_ALLREDUCE, ExchangeKind.SPARSE_ALLGATHER)

    def __init__(self, layout: Layout, world_size: int, rank: int, density: float, **knobs) -> None:
        super().__init__(layout, world_size, rank, density=density, **knobs)
        self._top_k = ExactTopK()

    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> torch.Tensor:
        return self._top_k(acc, self.k)

    def known_counts(self, step: int) -> list[int]:
        return [self.k] * self.world_size
