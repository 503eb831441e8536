"""Ok-Topk's exchange (ExchangeKind.SPARSE_REDUCE_SCATTER; docs/algorithms.md, "oktopk"): a sparse
reduce-scatter over W regions, then an all-gather of what the regions' owners keep.

    1. warm-up (the method selected None): a dense mean all-reduce, like the dense exchange;
    2. regions, when the method says they are due: every rank proposes W - 1 inner boundaries
       from its selection, the proposals are summed (one int64 all-reduce), and every method
       sets B_j = floor(sum / W); rank j owns [B_j, B_j+1);
    3. sizes: the W x W pair counts (how many of rank r's selected coordinates lie in region j)
       by an all-to-all of one int32 per pair;
    4. reduce-scatter: rank r's pairs in region j go to rank j (shift rounds s = 1..W-1, one
       packed (int32 index, value) message per pair); owner j sums them into its region in the
       released order, sources j, j-1, ..., j-W+1 (mod W);
    5. owners' selection: |sum| > the method's global threshold, or, on a recompute step (the
       threshold is None), every non-zero sum;
    6. all-gather: one int32 count per rank, then the owners' pairs (an all-gatherv); on a
       recompute step every rank keeps the k largest |sum| of them (ties: the lower index);
       agg = the kept sums / W; the method hears how many were gathered (and the k-th magnitude);
    7. residuals: rank r zeroes S_r where it meets the aggregate's coordinates.

Every owner's sum has one order whatever the hosting, so hosted and distributed runs are the
same bit for bit (warm-up steps aside: they sum as the run's `reduction` says).
"""
from __future__ import annotations

import torch

from experiments.core.collectives import RankCollectives
from experiments.core.exchange import ExchangeResult, dense_allreduce
from experiments.core.packing import INDEX_DTYPE, packed, unpacked
from experiments.core.phases import NO_CLOCK, PhaseClock
from sparsifiers.base import Sparsifier


def sparse_reduce_scatter(
    methods: list[Sparsifier],
    selections: list[torch.Tensor | None],
    accs: list[torch.Tensor],
    out: torch.Tensor,
    comm: RankCollectives,
    step: int,
    clock: PhaseClock = NO_CLOCK,
) -> ExchangeResult:
    """The module docstring's steps 1-7 for the hosted ranks (`methods`, `selections` and
    `accs` in hosted-rank order)."""
    if selections[0] is None:  # 1. warm-up
        return dense_allreduce(accs, out, comm, clock)
    world_size, device, dtype = comm.world_size, out.device, out.dtype
    row_bytes = INDEX_DTYPE.itemsize + dtype.itemsize
    method = methods[0]  # the schedule and the thresholds are identical on every rank

    # 2. regions
    if method.regions_due(step):
        cut_sums = comm.sum_over_ranks([m.region_cuts(s) for m, s in zip(methods, selections)])
        for m in methods:
            m.set_regions(cut_sums)
    bounds = method.region_boundaries.to(device)

    # 3. sizes: rank r's selection is ascending, so region j's share is one slice of it
    slices = [torch.searchsorted(selection, bounds) for selection in selections]
    sizes = comm.all_to_all_counts(torch.stack([ends.diff() for ends in slices]))
    clock.mark("index_exchange")

    # 4. reduce-scatter
    outgoing = {}
    for rank, selection, acc, ends in zip(comm.local_ranks, selections, accs, slices):
        parts = [selection[ends[j]:ends[j + 1]] for j in range(world_size)]
        outgoing[rank] = [packed(part.to(INDEX_DTYPE), acc[part]) for part in parts]
    received = comm.all_to_all_v(outgoing, sizes, row_bytes, device)

    # 5. owners' selection
    threshold = method.owner_threshold(step)
    blocks = []
    for owner in comm.local_ranks:
        start, end = int(bounds[owner]), int(bounds[owner + 1])
        sums = torch.zeros(end - start, dtype=dtype, device=device)
        for shift in range(world_size):  # indices within one message are distinct: each add is exact order
            indices, values = unpacked(received[owner][(owner - shift) % world_size], dtype)
            sums.index_add_(0, indices.long() - start, values)
        kept = torch.nonzero(sums != 0 if threshold is None else sums.abs() > threshold).view(-1)
        blocks.append(packed((kept + start).to(INDEX_DTYPE), sums[kept]))

    # 6. all-gather: the size header, then the blocks
    gathered_sizes = comm.all_gather(torch.tensor([[b.shape[0]] for b in blocks], dtype=INDEX_DTYPE, device=device))
    gathered = comm.all_gather_v(blocks, gathered_sizes.view(-1).tolist(), row_bytes, device)
    indices, values = unpacked(torch.cat(gathered), dtype)  # ascending: regions in order, each ascending
    kth_magnitude = None
    if threshold is None and indices.numel():
        keep = min(indices.numel(), method.k)
        order = torch.sort(values.abs(), descending=True, stable=True).indices[:keep]  # ties: the lower index
        kth_magnitude = float(values[order[-1]].abs())
        indices, values = indices[order], values[order]
    for m in methods:
        m.owners_kept(step, int(gathered_sizes.sum()), kth_magnitude)
    clock.mark("value_exchange")

    indices = indices.long()
    out.zero_()
    out.index_copy_(0, indices, values / world_size)
    # 7. residuals
    zeroed = [selection[torch.isin(selection, indices)] for selection in selections]
    clock.mark("scatter")
    return ExchangeResult(sizes.sum(dim=1).cpu(), int(indices.numel()), zeroed)
