"""gTop-k's tree merge (ExchangeKind.TREE_MERGE; docs/algorithms.md, "gtopk"): point-to-point
rounds up a binomial tree to rank 0, k pairs kept at every merge, then a broadcast."""
from __future__ import annotations

import torch

from experiments.engine.core.exchange.result import ExchangeRequest, ExchangeResult
from experiments.engine.core.packing import INDEX_DTYPE, packed, unpacked

# gTop-k's merged lists: the released numpy code holds them in float64 after a receiver's first
# merge (tree_merge); only what is sent, and rank 0's final list, is rounded to the wire dtype.
MERGED_DTYPE = torch.float64


def tree_merge(request: ExchangeRequest) -> ExchangeResult:
    """gTop-k's tree: every rank starts from its k (index, value) pairs; in round s = 1, 2, 4,
    ..., W/2 rank r + s sends its list to rank r (r a multiple of 2s), which merges the two
    (values at a common index summed) and keeps the k largest |sum| (ties: the lower index).
    Rank 0's list is broadcast: agg = those sums / W. A rank zeroes its residual where its own
    selection meets the final list; what a merge dropped stays.

    Every list has exactly k entries (two lists of k distinct indices hold at least k), so every
    rank knows every message's size: each round and the broadcast carry one message of k pairs
    (an int32 index and a value, packed), with no size header. The sums are the tree's, whatever
    the hosting: bit for bit the same hosted or distributed.

    Precision as released (numpy's promotion in `gtopk_sparse_allreduce`): a receiver's first
    merge adds in the accumulator's dtype (its own float32 values, added to in place); its list
    is float64 from then on (concatenated with the float64 receive buffer), so its later merges
    add, and choose their k, in float64. What a rank sends, and rank 0's final list, is rounded
    to the accumulator's dtype (the wire's)."""
    selections, accs, out, comm = request.selections, request.accs, request.out, request.comm
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
    request.clock.mark("value_exchange")  # indices travel with the values: no index phase of its own
    final_indices, final_values = unpacked(final, dtype)
    final_indices = final_indices.long()
    out.zero_()
    out.index_copy_(0, final_indices, final_values.div_(world_size))
    zeroed = [selection[torch.isin(selection, final_indices)] for selection in selections]
    request.clock.mark("scatter")
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
