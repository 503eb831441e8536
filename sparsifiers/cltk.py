"""CLT-k: cyclic local top-k (ScaleCom, NeurIPS 2020; ALGORITHMS.md, "CLT-k").

    1. Leader = t mod W.
    2. The leader selects its top-k of |acc| (in make_plan, the world's leader-plan request).
    3. Its indices are broadcast; every rank's selection is the leader's.
    4. Exchange: leader_broadcast: every rank allreduces its values at those indices.

Exactly k coordinates are aggregated and only the leader pays for a selection (the released
code selects on every rank and throws all but the leader's away). Scope `split`: one selector,
so build-up is 1.
"""
from __future__ import annotations

import torch

from sparsifiers.base import ExchangeKind, SelectionScope, Sparsifier
from sparsifiers.layout import Layout


class CLTK(Sparsifier):
    """Cyclic local top-k: the leader's top-k, applied by everyone."""

    name = "cltk"
    scope = SelectionScope.SPLIT
    exchanges = (ExchangeKind.LEADER_BROADCAST,)

    def __init__(self, layout: Layout, world_size: int, rank: int, density: float, **knobs) -> None:
        super().__init__(layout, world_size, rank, density=density, **knobs)
        # Preallocated once: the hot path allocates no full-size tensor per step.
        self._magnitude = torch.empty(0)
        self._values = torch.empty(0)
        self._indices = torch.empty(0, dtype=torch.int64)

    # 1. the leader rotates.
    def plan_leader(self, step: int) -> int:
        return step % self.world_size

    # 2. only the leader selects.
    def make_plan(self, acc: torch.Tensor, step: int) -> torch.Tensor:
        if self._magnitude.shape != acc.shape or self._magnitude.device != acc.device:
            self._magnitude = torch.empty_like(acc)
            self._values = torch.empty(self.k, dtype=acc.dtype, device=acc.device)
            self._indices = torch.empty(self.k, dtype=torch.int64, device=acc.device)
        torch.abs(acc, out=self._magnitude)
        torch.topk(self._magnitude, self.k, sorted=False, out=(self._values, self._indices))
        return self._indices

    # 3. every rank takes the broadcast indices as its selection.
    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> torch.Tensor:
        if plan is None:
            raise ValueError("cltk selects the leader's indices: the world must serve make_plan")
        return plan
