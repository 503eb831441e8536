"""Random-k: k coordinates drawn uniformly, the same on every rank.

    1. Stream (once): a generator seeded from the run seed alone, so every rank draws the same
       numbers; it is this object's own torch.Generator, so the training RNG is never touched.
    2. Draw (every step): k distinct indices, uniform over all k-subsets of [0, N).
    3. Exchange: shared_allreduce. The indices are identical everywhere by construction, so no
       index travels: the values there are allreduced. No build-up, no selection cost beyond the draw.

The draw allocates only k-sized tensors while k <= N / 2: iid uniform draws are deduplicated
(topped up until at least k distinct values exist), then a uniform k-subset of those is kept.
Every step of that is symmetric under relabelling [0, N), so the result is a uniform k-subset.
For k > N / 2 a permutation of [0, N) is drawn into a buffer allocated once. Draws happen on the
CPU and the k indices are then moved to the accumulator's device, so CPU and GPU runs of one seed
select the same coordinates.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sparsifiers.base import ExchangeKind, SelectionScope, Sparsifier
from sparsifiers.layout import Layout

INDEX_STREAM = 0x52414E44  # separates Random-k's stream from every other seeded stream


def shared_seed(seed: int) -> int:
    """The seed of the index generator every rank of a run seeded with `seed` shares."""
    return int(np.random.SeedSequence([seed, INDEX_STREAM]).generate_state(1)[0])


class RandomK(Sparsifier):
    """Random-k with error feedback: identical uniform indices on every rank from a shared seed."""

    name = "randomk"
    scope = SelectionScope.WHOLE
    exchanges = (ExchangeKind.SHARED_ALLREDUCE,)

    def __init__(self, layout: Layout, world_size: int, rank: int, density: float, **knobs) -> None:
        super().__init__(layout, world_size, rank, density=density, **knobs)
        # 1. Stream: the same seed on every rank.
        self._generator = torch.Generator().manual_seed(shared_seed(self.seed))
        self._permutation = torch.empty(0, dtype=torch.int64)  # only used when k > N / 2

    def _draw_sparse(self) -> torch.Tensor:
        """k distinct uniform indices for k <= N / 2, allocating only O(k)."""
        distinct = torch.empty(0, dtype=torch.int64)
        while distinct.numel() < self.k:
            missing = self.k - distinct.numel()
            # A little over what is missing: expected collisions are about missing * k / N.
            size = missing + missing * self.k // self.numel + 8
            draws = torch.randint(0, self.numel, (size,), generator=self._generator)
            distinct = torch.unique(torch.cat((distinct, draws)))
        if distinct.numel() > self.k:
            keep = torch.randperm(distinct.numel(), generator=self._generator)[: self.k]
            distinct = torch.sort(distinct[keep]).values
        return distinct

    def _draw_dense(self) -> torch.Tensor:
        """k distinct uniform indices for k > N / 2: the first k of a permutation."""
        if self._permutation.numel() != self.numel:
            self._permutation = torch.empty(self.numel, dtype=torch.int64)
        torch.randperm(self.numel, generator=self._generator, out=self._permutation)
        return torch.sort(self._permutation[: self.k]).values

    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> torch.Tensor:
        # 2. Draw: sorted, so the exchange gathers memory in order.
        chosen = self._draw_sparse() if 2 * self.k <= self.numel else self._draw_dense()
        return chosen.to(acc.device)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "index_seed": shared_seed(self.seed)}

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self._generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if set(state) != {"generator"}:
            raise ValueError(f"randomk state needs generator; got {sorted(state)}")
        self._generator.set_state(state["generator"])
