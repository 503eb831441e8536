"""CLT-k: cyclic local top-k (ScaleCom, NeurIPS 2020; docs/algorithms.md, "CLT-k").

    1. Leader = t mod W.
    2. The leader selects its top-k of |acc| (in make_plan, the world's leader-plan request).
    3. Its indices are broadcast; every rank's selection is the leader's.
    4. Exchange: leader_broadcast: every rank allreduces its values at those indices.

Exactly k coordinates are aggregated, and the plan is k indices, which every rank knows: its
broadcast goes without a size header (`plan_length`). The released code selects on every rank and throws all but
the leader's away; as docs/algorithms.md asks wherever released code and intent differ, that is the
default (`select_on: all`, so selection times match the papers' harness), and `select_on:
leader` is the evident intent: only the leader pays for a selection. Selections and results are
the same either way. Scope `split`: one selector, so build-up is 1.
"""
from __future__ import annotations

from typing import Any

import torch

from experiments.runformat.errors import ConfigError
from sparsifiers.common.base import SelectionScope, Sparsifier
from sparsifiers.common.exchange_kinds import ExchangeKind
from sparsifiers.common.kernels import ExactTopK
from sparsifiers.common.layout import Layout

SELECT_ON = ("leader", "all")


class CLTK(Sparsifier):
    """Cyclic local top-k: the leader's top-k, applied by everyone."""

    name = "cltk"
    scope = SelectionScope.SPLIT
    exchanges = (ExchangeKind.LEADER_BROADCAST,)

    def __init__(
        self, layout: Layout, world_size: int, rank: int, density: float, select_on: str = "all", **knobs
    ) -> None:
        super().__init__(layout, world_size, rank, density=density, **knobs)
        if select_on not in SELECT_ON:
            raise ConfigError(f"sparsifier.select_on must be leader or all, got {select_on}")
        self.select_on = select_on
        self._top_k = ExactTopK()

    # 1. the leader rotates.
    def plan_leader(self, step: int) -> int:
        return step % self.world_size

    # 2. the leader selects.
    def make_plan(self, acc: torch.Tensor, step: int) -> torch.Tensor:
        return self._top_k(acc, self.k)

    def plan_length(self, step: int) -> int:
        return self.k

    # 3. every rank takes the broadcast indices as its selection.
    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> torch.Tensor:
        if plan is None:
            raise ValueError("cltk selects the leader's indices: the world must serve make_plan")
        if self.select_on == "all" and self.rank != self.plan_leader(step):
            self._top_k(acc, self.k)  # the released code's wasted selection: its cost, not its result
        return plan

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "select_on": self.select_on}
