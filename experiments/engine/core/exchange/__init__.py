"""The exchange semantics (docs/algorithms.md, "Exchange kinds"): selections and accumulators of
all ranks -> one aggregate, as a registry of exchange kinds, one module per family:

    result.py     the request (`ExchangeRequest`), the result, the size header and padding
    index_set.py  union_allreduce, leader_broadcast, shared_allreduce: one index set every rank
                  holds (gathered, broadcast, or seeded), then `allreduce_at` it
    allgather.py  sparse_allgather: every rank's (index, value) pairs, summed in rank order
    tree.py       tree_merge (gTop-k): point-to-point rounds up a tree, then a broadcast
    dense.py      dense (optionally rounded to 16 bits) and low_rank (PowerSGD's hooks)
    regions.py    sparse_reduce_scatter (Ok-Topk's region owners)

Each function takes the step's `ExchangeRequest` for the ranks this process hosts, talks to the
other ranks only through `RankCollectives`, writes the aggregate (identical on every rank) into
`request.out`, and says which coordinates each hosted rank must zero in its residual (or, for
the low-rank exchange, that the residual is acc - aggregate). A family that needs a method's
capability (sparsifiers/common/capabilities.py: low_rank's `LowRank`, sparse_reduce_scatter's
`RegionOwner`) checks it and says clearly what is missing. The modules import result.py and
each other (regions.py's warm-up is dense.py's all-reduce), never this one.

Light on a GPU (issue 36): an exchange reads the size header on the host once (`rank_counts`;
known counts need no read, only their copy to the device) and then works on all W ranks' rows at
once (one padded copy, one accumulation), with no loop over the W ranks of small kernels or host
syncs; what is still per hosted rank is reading each rank's own accumulator (its values at S_r
or U: the ranks' buffers are separate tensors) and the sum in rank order, whose order is the
arithmetic (collectives.py). tests/test_exchange_syncs.py bounds the syncs and operations of a
hosted exchange independently of W.
"""
from __future__ import annotations

from typing import Callable

from experiments.engine.core.exchange.allgather import add_in_order, sparse_allgather
from experiments.engine.core.exchange.dense import dense_allreduce, dense_exchange, low_rank_allreduce
from experiments.engine.core.exchange.index_set import allreduce_at, leader_allreduce, shared_allreduce, union_allreduce
from experiments.engine.core.exchange.regions import sparse_reduce_scatter
from experiments.engine.core.exchange.result import PAD, ExchangeRequest, ExchangeResult
from experiments.engine.core.exchange.tree import MERGED_DTYPE, merge_top_k, tree_merge
from experiments.engine.core.packing import INDEX_DTYPE
from sparsifiers.common.exchange_kinds import ExchangeKind

__all__ = ["EXCHANGES", "INDEX_DTYPE", "MERGED_DTYPE", "PAD", "ExchangeRequest", "ExchangeResult", "add_in_order",
           "allreduce_at", "dense_allreduce", "exchange", "merge_top_k"]

EXCHANGES: dict[ExchangeKind, Callable[[ExchangeRequest], ExchangeResult]] = {
    ExchangeKind.DENSE: dense_exchange,
    ExchangeKind.UNION_ALLREDUCE: union_allreduce,
    ExchangeKind.SPARSE_ALLGATHER: sparse_allgather,
    ExchangeKind.LEADER_BROADCAST: leader_allreduce,
    ExchangeKind.SHARED_ALLREDUCE: shared_allreduce,
    ExchangeKind.TREE_MERGE: tree_merge,
    ExchangeKind.SPARSE_REDUCE_SCATTER: sparse_reduce_scatter,
    ExchangeKind.LOW_RANK: low_rank_allreduce,
}
# The optional parts of a request, and the kinds that take them: shared indices join a union;
# known counts replace a size header, which only these two send.
TAKES_SHARED = frozenset({ExchangeKind.UNION_ALLREDUCE})
TAKES_COUNTS = frozenset({ExchangeKind.UNION_ALLREDUCE, ExchangeKind.SPARSE_ALLGATHER})


def exchange(kind: ExchangeKind, request: ExchangeRequest) -> ExchangeResult:
    """Runs one exchange of `kind` (the method's `exchange`) on `request`."""
    if request.shared is not None and kind not in TAKES_SHARED:
        raise ValueError(f"shared indices are aggregated by union_allreduce only, not {kind.value}")
    if request.counts is not None and kind not in TAKES_COUNTS:
        raise ValueError(f"known counts replace the size header of union_allreduce and sparse_allgather, "
                         f"and {kind.value} sends none")
    try:
        run = EXCHANGES[kind]
    except KeyError:
        raise ValueError(f"unknown exchange kind {kind}") from None
    return run(request)
