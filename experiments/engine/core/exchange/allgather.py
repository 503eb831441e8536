"""The sparse all-gather (docs/algorithms.md, "Exchange kinds"): every rank's (index, value)
pairs gathered by all, summed in rank order."""
from __future__ import annotations

import torch

from experiments.engine.core.exchange.result import (
    ExchangeRequest, ExchangeResult, hosted, padded, padded_rows, rank_counts, valid,
)
from sparsifiers.common.kernels import sorted_union


def sparse_allgather(request: ExchangeRequest) -> ExchangeResult:
    """Allgather (index, value) pairs, after the counts (the size header; not sent when the
    counts are known, `request.counts`); agg = (1/W) sum_r scatter(S_r, acc_r[S_r]). Each rank
    zeroes only its own selection."""
    selections, accs, out, comm, clock = request.selections, request.accs, request.out, request.comm, request.clock
    counts, sizes = rank_counts(selections, comm, out.device, request.counts)
    width = max(sizes)
    local = hosted(counts, comm)
    all_indices = comm.all_gather(padded_rows(selections, local, width, out.device))
    clock.mark("index_exchange")
    # Each hosted rank's values at its own selection (its buffer is its own), one padded copy.
    values = padded([acc[selection] for selection, acc in zip(selections, accs)], local, width, 0, out.dtype, out.device)
    all_values = comm.all_gather(values)
    clock.mark("value_exchange")
    out.zero_()
    # Where the W ranks' pairs are, rank-major (every rank's pairs in rank order): one host read.
    pairs = valid(counts, width).view(-1).nonzero().squeeze(1)
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
