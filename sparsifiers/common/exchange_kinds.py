"""What a method declares about its exchange, and what the exchange tells it back.

`ExchangeKind` names how the ranks' selections become one aggregate (the exchange package,
experiments/engine/core/exchange/, has one function per kind); `Feedback` is what every method hears
after it (`Sparsifier.observe`); `WireAllReduce` describes one fixed-size message of a method
whose exchange the model alone sizes (sparsifiers/common/capabilities.py, `FixedMessages`).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import torch


class ExchangeKind(str, Enum):
    """How the ranks' selections become one aggregate (docs/algorithms.md, "Exchange kinds")."""

    DENSE = "dense"  # allreduce of the whole vector
    UNION_ALLREDUCE = "union_allreduce"  # allgather indices, allreduce values on the union
    SPARSE_ALLGATHER = "sparse_allgather"  # allgather (index, value) pairs
    LEADER_BROADCAST = "leader_broadcast"  # the leader's indices, allreduce values there
    SHARED_ALLREDUCE = "shared_allreduce"  # identical indices on every rank by construction
    # (a shared seed, Random-k): no index traffic, allreduce the values
    TREE_MERGE = "tree_merge"  # gTop-k: (index, value) lists merged up a binomial tree to rank 0,
    # k kept at every merge, the result broadcast; W a power of 2
    SPARSE_REDUCE_SCATTER = "sparse_reduce_scatter"  # Ok-Topk: each rank's pairs in W regions go to
    # the regions' owners (uneven point-to-point rounds), each owner sums its region and keeps
    # what passes a global threshold, and the owners' pairs are all-gathered; the method's
    # region hooks (capabilities.RegionOwner) say where the regions lie and what owners keep
    LOW_RANK = "low_rank"  # PowerSGD: no selection; allreduce the small tensors whole, then the
    # low-rank factors P and Q of the others, through the method's hooks (capabilities.LowRank)


@dataclass(frozen=True)
class Feedback:
    """What the exchange did, known identically on every rank."""

    step: int
    counts: torch.Tensor  # int64 [W]: |S_r| for every rank r (0 for ranks that did not select)
    aggregated: int  # |U|: coordinates in the aggregate


@dataclass(frozen=True)
class WireAllReduce:
    """One all-reduce of a method whose messages have a size fixed by the model alone (dense,
    PowerSGD), so that a cluster model can price its exchange at any W without running it: each
    rank contributes `elements` values of `element_bytes` each (per-rank bytes of a ring
    all-reduce: 2 (W - 1) / W * elements * element_bytes)."""

    what: str  # "values" (dense), "uncompressed", "p", "q" (PowerSGD)
    elements: int
    element_bytes: int
