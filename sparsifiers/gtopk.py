"""gTop-k (Shi et al., ICDCS 2019) as the released code runs it by default (hclhkbu/gtopkssgd,
allreducer.py `gtopk_sparse_allreduce`): a binomial-tree reduce of top-k lists to rank 0, then
a broadcast.

    1. Selection: each rank's exact top-k of |acc| (k = floor(density * N)), signed values.
    2. Rounds s = 1, 2, ..., W/2: rank r + s sends its k pairs to rank r (r a multiple of 2s) and
       drops out; r merges the two lists, values at a common index summed, and keeps the k
       largest |sum| (ties: the lower index). As numpy runs the released code, a receiver's list
       is float64 after its first merge; what is sent, and rank 0's final list, is float32.
    3. Rank 0 broadcasts its k pairs; agg = those sums / W on every rank.
    4. Error feedback: a rank zeroes its residual where its own selection meets the final k;
       the rest of its selection stays. A value a merge dropped while its index survived through
       another subtree is zeroed all the same (the released approximation, the paper's rule).

The tree (experiments/engine/core/exchange/tree.py, `tree_merge`) needs W a power of 2: the released code
fails on any other W (an odd round), and so this refuses it before launch. Where sparsebench
departs from the release (the wire format, ties, the density warm-up): docs/algorithms.md.
"""
from __future__ import annotations

import torch

from experiments.runformat.errors import ConfigError
from sparsifiers.common.base import SelectionScope, Sparsifier
from sparsifiers.common.exchange_kinds import ExchangeKind
from sparsifiers.common.kernels import ExactTopK
from sparsifiers.common.layout import Layout


class GTopK(Sparsifier):
    """Local top-k, merged up a tree to the global top-k."""

    name = "gtopk"
    scope = SelectionScope.WHOLE
    exchanges = (ExchangeKind.TREE_MERGE,)

    def __init__(self, layout: Layout, world_size: int, rank: int, density: float, **knobs) -> None:
        if world_size & (world_size - 1):
            lower = 1 << (world_size.bit_length() - 1)
            raise ConfigError(
                f"workers={world_size}: gtopk merges along a binomial tree and needs a power of 2 workers "
                f"(the released code fails on any other count): set workers={lower} or workers={2 * lower}")
        super().__init__(layout, world_size, rank, density=density, **knobs)
        self._top_k = ExactTopK()

    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> torch.Tensor:
        return self._top_k(acc, self.k)
