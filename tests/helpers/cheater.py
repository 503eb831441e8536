"""A method that cheats: every rank sends its top-2k, while its target (and `density/error`'s
reference) stays k. The generic verdicts must catch it (analysis/claims/generic.py): its traffic
per rank is 2 k and its aggregate at least 2 k, so the traffic and density verdicts fail with
those numbers. Registered only in tests (tests/helpers/fixture_methods.py)."""
from __future__ import annotations

import torch

from sparsifiers.topk import TopK


class TopTwoK(TopK):
    """Top-k's rule with twice the count: 2 k = 2 floor(density * N) indices per rank (at most N)."""

    name = "top2k"

    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> torch.Tensor:
        return self._top_k(acc, self.sent)

    def known_counts(self, step: int) -> list[int]:
        return [self.sent] * self.world_size

    @property
    def sent(self) -> int:
        return min(2 * self.k, self.numel)
