"""The exchange semantics (docs/algorithms.md, "Exchange kinds"): selections and accumulators of all ranks -> one aggregate.

Each function takes the selections and accumulators of the ranks this process hosts, talks to
the other ranks only through `RankCollectives`, writes the aggregate (identical on every rank)
into `out`, and says which coordinates each hosted rank must zero in its residual (or, for the
low-rank exchange, that the residual is acc - aggregate). Three of them (union, leader, shared)
differ only in how the ranks come to hold one index set; from there they are one operation,
`allreduce_at`. The tree merge (gTop-k) goes its own way: point-to-point rounds up a tree,
then a broadcast; so does Ok-Topk's sparse reduce-scatter (region_exchange.py). The dense exchange may round every contribution to a 16-bit wire type (the
method's `wire_dtype`), and the low-rank one computes its messages through the method's
`low_rank_*` hooks: those two need the hosted ranks' sparsifiers (`methods`).

Indices travel as int32 (every model here has fewer than 2**31 gradient elements), values in the
accumulator's dtype; padding and size headers are sent and counted like everything else. The
size header (every rank's |S_r|, all-gathered before the indices) is sent only when the counts
vary with the data: a method whose counts every rank knows before the exchange (Top-k's k, the
counts a shared plan fixes: `Sparsifier.known_counts`) passes them as `counts`, and the union and
sparse all-gather exchanges skip the header, checking the hosted ranks' selections against them.

Light on a GPU (issue 36): an exchange reads the size header on the host once (`_counts`; known
counts need no read, only their copy to the device) and
then works on all W ranks' rows at once (one padded copy, one accumulation), with no loop over
the W ranks of small kernels or host syncs; what is still per hosted rank is reading each rank's
own accumulator (its values at S_r or U: the ranks' buffers are separate tensors) and the sum in
rank order, whose order is the arithmetic (collectives.py). tests/test_exchange_syncs.py bounds the
syncs and operations of a hosted exchange independently of W.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from experiments.core.collectives import RankCollectives
from experiments.core.packing import INDEX_DTYPE, packed, unpacked
from experiments.core.phases import NO_CLOCK, PhaseClock
from sparsifiers.base import ExchangeKind, Sparsifier
from sparsifiers.kernels import sorted_union

PAD = -1  # index padding: never a valid coordinate
# gTop-k's merged lists: the released numpy code holds them in float64 after a receiver's first
# merge (tree_merge); only what is sent, and rank 0's final list, is rounded to the wire dtype.
MERGED_DTYPE = torch.float64


@dataclass
class ExchangeResult:
    """What the exchange did: the same on every rank, except `zeroed` (per hosted rank)."""

    counts: torch.Tensor  # int64 [W]: |S_r| of every rank
    aggregated: int  # |U|
    zeroed: list[torch.Tensor | None]  # per hosted rank: residual coordinates to zero (None: all)
    shared: int = 0  # |C|: coordinates of U added by every rank unexchanged (in no rank's S_r)
    # Set by the low-rank exchange: every hosted rank's residual becomes acc - this (the
    # aggregate) instead of acc with `zeroed` zeroed (experiments/core/error_feedback.py).
    subtracted: torch.Tensor | None = None


def exchange(
    kind: ExchangeKind,
    selections: list[torch.Tensor | None],
    accs: list[torch.Tensor],
    out: torch.Tensor,
    comm: RankCollectives,
    leader: int | None = None,
    shared: torch.Tensor | None = None,
    clock: PhaseClock = NO_CLOCK,
    methods: list[Sparsifier] | None = None,
    step: int = 0,
    counts: list[int] | None = None,
) -> ExchangeResult:
    """Runs one exchange of `kind`. `leader` is the selecting rank for LEADER_BROADCAST; `shared`
    (UNION_ALLREDUCE only) the indices every rank adds to the union unexchanged
    (`Sparsifier.shared_indices`); `clock` times its phases (the step benchmark); `methods` the
    hosted ranks' sparsifiers (DENSE reads the wire dtype, LOW_RANK and SPARSE_REDUCE_SCATTER
    call the hooks; without them DENSE is fp32) and `step` the step (LOW_RANK: the vanilla steps
    before compression). `counts` (UNION_ALLREDUCE and SPARSE_ALLGATHER only): every rank's
    |S_r| when every rank knows them before the exchange (`Sparsifier.known_counts`): no size
    header is sent; None: it is."""
    if shared is not None and kind is not ExchangeKind.UNION_ALLREDUCE:
        raise ValueError(f"shared indices are aggregated by union_allreduce only, not {kind.value}")
    if counts is not None and kind not in (ExchangeKind.UNION_ALLREDUCE, ExchangeKind.SPARSE_ALLGATHER):
        raise ValueError(f"known counts replace the size header of union_allreduce and sparse_allgather, "
                         f"and {kind.value} sends none")
    if kind is ExchangeKind.DENSE:
        return dense_allreduce(accs, out, comm, clock, methods[0].wire_dtype if methods else None)
    if kind is ExchangeKind.LOW_RANK:
        if not methods:
            raise ValueError("low_rank needs the hosted ranks' sparsifiers")
        return low_rank_allreduce(methods, accs, out, comm, step, clock)
    if kind is ExchangeKind.UNION_ALLREDUCE:
        return union_allreduce(selections, accs, out, comm, shared, clock, counts)
    if kind is ExchangeKind.SPARSE_ALLGATHER:
        return sparse_allgather(selections, accs, out, comm, clock, counts)
    if kind is ExchangeKind.LEADER_BROADCAST:
        if leader is None:
            raise ValueError("leader_broadcast needs the leader rank")
        return leader_allreduce(selections, accs, out, comm, leader, clock)
    if kind is ExchangeKind.SHARED_ALLREDUCE:
        return shared_allreduce(selections, accs, out, comm, clock)
    if kind is ExchangeKind.TREE_MERGE:
        return tree_merge(selections, accs, out, comm, clock)
    if kind is ExchangeKind.SPARSE_REDUCE_SCATTER:
        if not methods:
            raise ValueError("sparse_reduce_scatter needs the hosted ranks' sparsifiers")
        # Here, not at the top: the region exchange builds on this module's dense exchange.
        from experiments.core.region_exchange import sparse_reduce_scatter
        return sparse_reduce_scatter(methods, selections, accs, out, comm, step, clock)
    raise ValueError(f"unknown exchange kind {kind}")


def dense_allreduce(
    accs: list[torch.Tensor], out: torch.Tensor, comm: RankCollectives, clock: PhaseClock = NO_CLOCK,
    wire_dtype: torch.dtype | None = None,
) -> ExchangeResult:
    """agg = mean_r acc_r over the whole vector. With a 16-bit `wire_dtype` h, torch's compress
    hooks' semantics: c_r = round_h(round_h(acc_r) / W) (cast, then divide in h), the sum of the
    c_r carried in fp32 through the run's reduction, agg = round_h(sum) back in fp32; metered at
    h's size (gloo carries the rounded values in fp32 here, the meter counts the wire format)."""
    if wire_dtype is None:
        comm.sum_over_ranks(accs, out)
        out.div_(comm.world_size)
    else:
        # Hidden cost: one full-size temporary per hosted rank (the rounded contribution).
        parts = [acc.to(wire_dtype).div_(comm.world_size).to(out.dtype) for acc in accs]
        comm.sum_over_ranks(parts, out, wire_element_bytes=torch.finfo(wire_dtype).bits // 8)
        out.copy_(out.to(wire_dtype))
    clock.mark("value_exchange")
    numel = out.numel()
    counts = torch.full((comm.world_size,), numel, dtype=torch.int64)
    return ExchangeResult(counts, numel, [None] * len(accs))


def low_rank_allreduce(
    methods: list[Sparsifier], accs: list[torch.Tensor], out: torch.Tensor, comm: RankCollectives, step: int,
    clock: PhaseClock = NO_CLOCK,
) -> ExchangeResult:
    """PowerSGD (sparsifiers/powersgd.py, torch's powerSGD_hook): three all-reduces, of the
    tensors sent whole, of the P_r, of the Q_r; the hooks compute each rank's messages and the
    aggregate. Every coordinate gets a value (|U| = N); `counts` are the elements each rank
    sent; the residual is acc - aggregate (`subtracted`). Before the method's start step,
    torch's vanilla all-reduce instead: sum_r (acc_r / W), divided first as torch divides."""
    world_size, numel = comm.world_size, out.numel()
    if not methods[0].low_rank_active(step):
        comm.sum_over_ranks([acc / world_size for acc in accs], out)
        clock.mark("value_exchange")
        return ExchangeResult(torch.full((world_size,), numel, dtype=torch.int64), numel, [None] * len(accs))
    uncompressed = _summed(comm, [m.low_rank_uncompressed(acc) for m, acc in zip(methods, accs)]).div_(world_size)
    p_sum = _summed(comm, [m.low_rank_p(acc) for m, acc in zip(methods, accs)])
    q = _summed(comm, [m.low_rank_q(acc, p_sum) for m, acc in zip(methods, accs)]).div_(world_size)
    clock.mark("value_exchange")
    for index, method in enumerate(methods):  # identical on every rank: the first writes it
        method.low_rank_decompress(uncompressed, q, out if index == 0 else None)
    clock.mark("scatter")
    sent = uncompressed.numel() + p_sum.numel() + q.numel()
    counts = torch.full((world_size,), sent, dtype=torch.int64)
    return ExchangeResult(counts, numel, [None] * len(accs), subtracted=out)


def _summed(comm: RankCollectives, parts: list[torch.Tensor]) -> torch.Tensor:
    """The sum over ranks of equal-sized messages, in a new tensor. An empty message (a model
    with no tensor sent whole, or none compressed) is not sent: its size is the model's, so
    every rank skips it alike (torch's hook issues it, at a latency the meter leaves out)."""
    if parts[0].numel() == 0:
        return parts[0].clone()
    return comm.sum_over_ranks(parts)


def union_allreduce(
    selections: list[torch.Tensor],
    accs: list[torch.Tensor],
    out: torch.Tensor,
    comm: RankCollectives,
    shared: torch.Tensor | None = None,
    clock: PhaseClock = NO_CLOCK,
    known: list[int] | None = None,
) -> ExchangeResult:
    """Allgather counts (the size header; not sent when the counts are `known`), then the index
    lists padded to the largest count; every rank forms the union U and allreduces its
    accumulator at U; agg[U] = mean. Every rank zeroes all of U.

    `shared`: indices C every rank adds to U without exchanging them (DEFT's common units, known
    from the plan). By the sparsifier's contract they are identical on every rank and in no
    rank's selection, so they are appended to the selections' union without a second
    deduplication: U = (union of the S_r) + C, |U| = |union of the S_r| + |C|. They send no index
    bytes and count in no |S_r|; their values travel in the allreduce with the rest of U."""
    counts, sizes = _counts(selections, comm, out.device, known)
    width = max(sizes)
    # Every rank knows width from the counts: when nobody selected (every unit shared), all
    # skip the index allgather alike (it would move 0 bytes).
    if width > 0:
        all_indices = comm.all_gather(_padded_rows(selections, _local(counts, comm), width, out.device))
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


def sparse_allgather(
    selections: list[torch.Tensor],
    accs: list[torch.Tensor],
    out: torch.Tensor,
    comm: RankCollectives,
    clock: PhaseClock = NO_CLOCK,
    known: list[int] | None = None,
) -> ExchangeResult:
    """Allgather (index, value) pairs, after the counts (the size header; not sent when the
    counts are `known`); agg = (1/W) sum_r scatter(S_r, acc_r[S_r]). Each rank zeroes only its
    own selection."""
    counts, sizes = _counts(selections, comm, out.device, known)
    width = max(sizes)
    local = _local(counts, comm)
    all_indices = comm.all_gather(_padded_rows(selections, local, width, out.device))
    clock.mark("index_exchange")
    # Each hosted rank's values at its own selection (its buffer is its own), one padded copy.
    values = _padded([acc[selection] for selection, acc in zip(selections, accs)], local, width, 0, out.dtype, out.device)
    all_values = comm.all_gather(values)
    clock.mark("value_exchange")
    out.zero_()
    # Where the W ranks' pairs are, rank-major (every rank's pairs in rank order): one host read.
    pairs = _valid(counts, width).view(-1).nonzero().squeeze(1)
    add_in_order(out, all_indices.view(-1).index_select(0, pairs).long(), all_values.view(-1).index_select(0, pairs))
    out.div_(comm.world_size)
    union = sorted_union(all_indices, counts, out.numel())
    clock.mark("scatter")
    return ExchangeResult(torch.tensor(sizes, dtype=torch.int64), int(union.numel()), [s.long() for s in selections])


def add_in_order(out: torch.Tensor, indices: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """out[indices[i]] += values[i] for i = 0, 1, ... in that order: at a coordinate several
    pairs share (W ranks' selections overlap), the values add in the order given, rank order
    here, as W index_add_ calls one rank at a time did. On the CPU one index_add_ of a 1-D tensor
    does exactly that (a serial loop over the index; not index_put_, whose accumulation goes
    parallel with atomics past 32k elements). On CUDA index_add_ adds with atomics, in no fixed
    order, so the pairs go through index_put_(accumulate=True): torch sorts them by coordinate
    (a stable sort) and sums each coordinate's values in one thread, in their order, for up to
    32 pairs a coordinate (a warp's tree beyond), then adds the sum to `out`: deterministic, and
    for W <= 32 the same order as rank by rank (from a zero `out`). The GPU check compares it
    with the rank-by-rank loop bit for bit (tests/test_exchange_syncs.py)."""
    if out.device.type == "cuda":
        return out.index_put_((indices,), values, accumulate=True)
    return out.index_add_(0, indices, values)


def leader_allreduce(
    selections: list[torch.Tensor],
    accs: list[torch.Tensor],
    out: torch.Tensor,
    comm: RankCollectives,
    leader: int,
    clock: PhaseClock = NO_CLOCK,
) -> ExchangeResult:
    """CLT-k's pattern: every rank holds the leader's broadcast indices; allreduce values there.
    Only the leader selected, so the counts are |S| at the leader and 0 elsewhere."""
    selection = selections[0].long()
    counts = torch.zeros(comm.world_size, dtype=torch.int64)
    counts[leader] = selection.numel()
    return allreduce_at(selection, accs, out, comm, counts, clock)


def shared_allreduce(
    selections: list[torch.Tensor],
    accs: list[torch.Tensor],
    out: torch.Tensor,
    comm: RankCollectives,
    clock: PhaseClock = NO_CLOCK,
) -> ExchangeResult:
    """Selections identical on every rank by construction (a shared seed): no index traffic,
    allreduce the values there. Every rank selected |S|; the union is S."""
    selection = selections[0].long()
    counts = torch.full((comm.world_size,), selection.numel(), dtype=torch.int64)
    return allreduce_at(selection, accs, out, comm, counts, clock)


def tree_merge(
    selections: list[torch.Tensor],
    accs: list[torch.Tensor],
    out: torch.Tensor,
    comm: RankCollectives,
    clock: PhaseClock = NO_CLOCK,
) -> ExchangeResult:
    """gTop-k's tree (docs/algorithms.md, "gtopk"): every rank starts from its k (index, value)
    pairs; in round s = 1, 2, 4, ..., W/2 rank r + s sends its list to rank r (r a multiple of
    2s), which merges the two (values at a common index summed) and keeps the k largest |sum|
    (ties: the lower index). Rank 0's list is broadcast: agg = those sums / W. A rank zeroes
    its residual where its own selection meets the final list; what a merge dropped stays.

    Every list has exactly k entries (two lists of k distinct indices hold at least k), so every
    rank knows every message's size: each round and the broadcast carry one message of k pairs
    (an int32 index and a value, packed), with no size header. The sums are the tree's, whatever
    the hosting: bit for bit the same hosted or distributed.

    Precision as released (numpy's promotion in `gtopk_sparse_allreduce`): a receiver's first
    merge adds in the accumulator's dtype (its own float32 values, added to in place); its list
    is float64 from then on (concatenated with the float64 receive buffer), so its later merges
    add, and choose their k, in float64. What a rank sends, and rank 0's final list, is rounded
    to the accumulator's dtype (the wire's)."""
    world_size, k, device, dtype = comm.world_size, selections[0].numel(), out.device, out.dtype
    shape = (k, INDEX_DTYPE.itemsize + dtype.itemsize)  # k pairs, as bytes
    lists = {rank: (selection.to(INDEX_DTYPE), acc[selection]) for rank, selection, acc
             in zip(comm.local_ranks, selections, accs)}
    stride = 1
    while stride < world_size:
        senders = [rank for rank in lists if rank % (2 * stride) == stride]
        received = comm.tree_round({rank: _wire(*lists.pop(rank), dtype) for rank in senders}, stride, shape,
                                   torch.uint8, device)
        for rank, message in received.items():
            lists[rank] = merge_top_k(*lists[rank], *unpacked(message, dtype), k)
        stride *= 2
    final = comm.broadcast(_wire(*lists[0], dtype) if 0 in lists else None, 0, torch.uint8, device, shape)
    clock.mark("value_exchange")  # indices travel with the values: no index phase of its own
    final_indices, final_values = unpacked(final, dtype)
    final_indices = final_indices.long()
    out.zero_()
    out.index_copy_(0, final_indices, final_values.div_(world_size))
    zeroed = [selection[torch.isin(selection, final_indices)] for selection in selections]
    clock.mark("scatter")
    counts = torch.full((world_size,), k, dtype=torch.int64)
    return ExchangeResult(counts, int(final_indices.numel()), zeroed)


def _wire(indices: torch.Tensor, values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A tree message: the list's values rounded to the wire's `dtype` (the released
    `values.astype(np.float32)` before a Send and at rank 0's end), packed with the indices."""
    return packed(indices, values.to(dtype))


def merge_top_k(indices: torch.Tensor, values: torch.Tensor, incoming_indices: torch.Tensor,
                incoming_values: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two (index, value) lists as one: values at a common index summed in the own list's dtype
    (the released in-place `values[c1] += ...`: float32 at a receiver's first merge, float64
    after), then the k largest |value| of the float64 list (the released concatenation with the
    float64 receive buffer), ties to the lower index (the released code leaves ties to numpy's
    sort). Returns float64 values. Sorted by index, so that a stable sort by magnitude breaks
    ties by index. (Summed into zeros, a lone -0.0 comes out +0.0: the same magnitude, the same
    aggregate to the last bit but the sign.)"""
    merged, slot = torch.unique(torch.cat([indices, incoming_indices]), sorted=True, return_inverse=True)
    sums = torch.zeros(merged.numel(), dtype=values.dtype, device=values.device)
    sums.index_add_(0, slot, torch.cat([values, incoming_values.to(values.dtype)]))  # two terms at most: one sum
    sums = sums.to(MERGED_DTYPE)
    kept = torch.sort(sums.abs(), descending=True, stable=True).indices[:k]
    return merged[kept], sums[kept]


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
    gathered = [acc.index_select(0, indices) for acc in accs]  # fresh tensors: sum into the first
    values = comm.sum_over_ranks(gathered, gathered[0])
    clock.mark("value_exchange")
    out.zero_()
    out.index_copy_(0, indices, values.div_(comm.world_size))
    clock.mark("scatter")
    return ExchangeResult(counts, int(indices.numel()), [indices] * len(accs), shared)


def _counts(selections: list[torch.Tensor], comm: RankCollectives, device: torch.device,
            known: list[int] | None = None) -> tuple[torch.Tensor, list[int]]:
    """Every rank's |S_r|, as int64 on the device and as numbers on the host. Without `known`,
    the size header: an all-gather of one int32 per rank, the one read of the device the
    exchange makes before its values (on CUDA, the header's copy there and back). With `known`
    (every rank's count, which every rank holds), nothing is sent and nothing read: the hosted
    ranks' selections are checked against their entries on the host (numel() reads no device
    value), since a rank that selected another count would pad and read past its row."""
    if known is None:
        local = torch.tensor([[s.numel()] for s in selections], dtype=INDEX_DTYPE, device=device)
        counts = comm.all_gather(local).view(-1).long()
        return counts, counts.tolist()
    sizes = [int(count) for count in known]
    if len(sizes) != comm.world_size:
        raise ValueError(f"known counts name {len(sizes)} ranks, the world has {comm.world_size}")
    for rank, selection in zip(comm.local_ranks, selections):
        if selection.numel() != sizes[rank]:
            raise ValueError(f"rank {rank} selected {selection.numel()} coordinates, but its count was announced "
                             f"as {sizes[rank]} (Sparsifier.known_counts): the exchange would send no size header")
    return torch.tensor(sizes, dtype=torch.int64, device=device), sizes


def _local(counts: torch.Tensor, comm: RankCollectives) -> torch.Tensor:
    """The hosted ranks' entries of `counts` (contiguous ranks: a slice, no copy)."""
    return counts[comm.local_ranks[0]: comm.local_ranks[0] + comm.local_size]


def _valid(counts: torch.Tensor, width: int) -> torch.Tensor:
    """[ranks, width] bool: position j of row r holds one of rank r's |S_r| entries."""
    return torch.arange(width, device=counts.device) < counts[:, None]


def _padded(parts: list[torch.Tensor], sizes: torch.Tensor, width: int, fill: int, dtype: torch.dtype,
            device: torch.device) -> torch.Tensor:
    """The parts as the rows of a [len(parts), width] tensor, each padded with `fill`: one fill
    and one masked copy (row-major, so part r lands in row r), not a copy per row."""
    rows = torch.full((len(parts), width), fill, dtype=dtype, device=device)
    if width > 0:
        rows.masked_scatter_(_valid(sizes, width), torch.cat(parts).to(dtype))
    return rows


def _padded_rows(selections: list[torch.Tensor], sizes: torch.Tensor, width: int, device: torch.device) -> torch.Tensor:
    """Padding: gloo rejects uneven all_gather, so every rank sends `width` indices."""
    return _padded(selections, sizes, width, PAD, INDEX_DTYPE, device)

