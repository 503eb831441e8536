"""The exchanges that allreduce the accumulators at one index set every rank holds
(docs/algorithms.md, "Exchange kinds"): union_allreduce, leader_broadcast and shared_allreduce
differ only in how the ranks come to hold the set (an all-gather of the selections, the leader's
broadcast plan, a shared seed); from there they are one operation, `allreduce_at`.
"""
from __future__ import annotations

import torch

from experiments.engine.core.collectives import RankCollectives
from experiments.engine.core.exchange.result import ExchangeRequest, ExchangeResult, hosted, padded_rows, rank_counts
from experiments.engine.core.packing import INDEX_DTYPE
from experiments.engine.core.phases import NO_CLOCK, PhaseClock
from sparsifiers.common.kernels import sorted_union


def union_allreduce(request: ExchangeRequest) -> ExchangeResult:
    """Allgather counts (the size header; not sent when the counts are known, `request.counts`),
    then the index lists padded to the largest count; every rank forms the union U and
    allreduces its accumulator at U; agg[U] = mean. Every rank zeroes all of U.

    `request.shared`: indices C every rank adds to U without exchanging them (DEFT's common
    units, known from the plan: capabilities.SharedIndices). By that contract they are identical
    on every rank and in no rank's selection, so they are appended to the selections' union
    without a second deduplication: U = (union of the S_r) + C, |U| = |union of the S_r| + |C|.
    They send no index bytes and count in no |S_r|; their values travel in the allreduce with
    the rest of U."""
    selections, accs, out, comm, shared, clock = (request.selections, request.accs, request.out, request.comm,
                                                  request.shared, request.clock)
    counts, sizes = rank_counts(selections, comm, out.device, request.counts)
    width = max(sizes)
    # Every rank knows width from the counts: when nobody selected (every unit shared), all
    # skip the index allgather alike (it would move 0 bytes).
    if width > 0:
        all_indices = comm.all_gather(padded_rows(selections, hosted(counts, comm), width, out.device))
    else:
        all_indices = torch.empty((comm.world_size, 0), dtype=INDEX_DTYPE, device=out.device)
    union = sorted_union(all_indices, counts, out.numel())
    appended = 0
    if shared is not None and shared.numel() > 0:
        # Disjoint from the selections by contract: appended, not merged (U need not be sorted,
        # only identical on every rank).
        union = torch.cat([union, shared.to(device=out.device, dtype=torch.int64)])
        appended = int(shared.numel())
    clock.mark("index_exchange")
    return allreduce_at(union, accs, out, comm, torch.tensor(sizes, dtype=torch.int64), clock, shared=appended)


def leader_allreduce(request: ExchangeRequest) -> ExchangeResult:
    """CLT-k's pattern: every rank holds the leader's broadcast indices; allreduce values there.
    Only the leader selected, so the counts are |S| at the leader and 0 elsewhere."""
    leader, comm = request.leader, request.comm
    if leader is None:
        raise ValueError("leader_broadcast needs the leader rank")
    selection = request.selections[0].long()
    counts = torch.zeros(comm.world_size, dtype=torch.int64)
    counts[leader] = selection.numel()
    return allreduce_at(selection, request.accs, request.out, comm, counts, request.clock)


def shared_allreduce(request: ExchangeRequest) -> ExchangeResult:
    """Selections identical on every rank by construction (a shared seed): no index traffic,
    allreduce the values there. Every rank selected |S|; the union is S."""
    selection, comm = request.selections[0].long(), request.comm
    counts = torch.full((comm.world_size,), selection.numel(), dtype=torch.int64)
    return allreduce_at(selection, request.accs, request.out, comm, counts, request.clock)


def allreduce_at(
    indices: torch.Tensor,
    accs: list[torch.Tensor],
    out: torch.Tensor,
    comm: RankCollectives,
    counts: torch.Tensor,
    clock: PhaseClock = NO_CLOCK,
    shared: int = 0,
) -> ExchangeResult:
    """Allreduce the accumulators at an index set every rank holds: the operation the union,
    leader and shared exchanges have in common once the ranks agree on the set (docs/algorithms.md,
    "Exchange kinds": agg[U] = mean_r acc_r[U], and every rank zeroes its residual on all
    of U).

    `indices` (int64, distinct: a union, or one selection every rank holds) is U; `out` becomes
    mean_r acc_r at U and 0 elsewhere, identical on every rank; every hosted rank zeroes all of
    U. What differs between the callers is only how the ranks came to hold U, so they pass what
    the result reports about it: `counts` (every rank's |S_r|, int64 on the CPU) and `shared`
    (|C|, the coordinates of U no rank selected). Distinct indices make index_copy_
    deterministic; the index_* ops are the same arithmetic as advanced indexing at about half
    the cost."""
    values = comm.sum_gathered_over_ranks(accs, indices)  # a fresh tensor, divided in place below
    clock.mark("value_exchange")
    out.zero_()
    out.index_copy_(0, indices, values.div_(comm.world_size))
    clock.mark("scatter")
    return ExchangeResult(counts, int(indices.numel()), [indices] * len(accs), shared)
