"""Dense allreduce: the baseline every sparsifier is compared with."""
from __future__ import annotations

import torch

from sparsifiers.base import ExchangeKind, SelectionScope, Sparsifier
from sparsifiers.layout import Layout


class Dense(Sparsifier):
    """Sends every coordinate: agg = mean_r acc_r. Error feedback has nothing to keep."""

    name = "dense"
    scope = SelectionScope.WHOLE
    exchanges = (ExchangeKind.DENSE,)

    def __init__(self, layout: Layout, world_size: int, rank: int, density: float = 1.0, **knobs) -> None:
        # Dense sends everything, so its target density is 1 whatever `density` says: a sweep or
        # an experiment file may set sparsifier.density for every method, the baseline included.
        super().__init__(layout, world_size, rank, density=1.0, **knobs)
        self.requested_density = float(density)

    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> None:
        return None  # everything
