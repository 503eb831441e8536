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
    7. residuals: rank r zeroes S_r where it meets the aggregate's coordinates (on a recompute
       step the method may instead say which it finds, as the released lookup does).

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
    ends = [torch.searchsorted(selection, bounds) for selection in selections]
    sizes = comm.all_to_all_counts(torch.stack([e.diff() for e in ends]))
    clock.mark("index_exchange")

    # 4. reduce-scatter: each rank's pairs packed once; a message is a slice of them
    outgoing = {}
    for rank, selection, acc, edges in zip(comm.local_ranks, selections, accs, ends):
        pairs, edges = packed(selection.to(INDEX_DTYPE), acc[selection]), edges.tolist()
        outgoing[rank] = [pairs[edges[j]:edges[j + 1]] for j in range(world_size)]
    received = comm.all_to_all_v(outgoing, sizes, row_bytes, device)
    sums, start = _owner_sums(received, sizes, bounds, comm, dtype, device)

    # 5. owners' selection, every hosted owner's region at once (they are contiguous)
    threshold = method.owner_threshold(step)
    kept = torch.nonzero(sums != 0 if threshold is None else sums.abs() > threshold).view(-1)
    kept_pairs = packed((kept + start).to(INDEX_DTYPE), sums[kept])
    owned = bounds[comm.local_ranks[0]:comm.local_ranks[-1] + 2] - start
    edges = torch.searchsorted(kept, owned).tolist()
    blocks = [kept_pairs[edges[i]:edges[i + 1]] for i in range(comm.local_size)]

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

    kept_order, indices = indices, indices.long()  # kept_order: as kept (a recompute step: by magnitude)
    out.zero_()
    out.index_copy_(0, indices, values / world_size)
    # 7. residuals: where a rank's selection meets the aggregate's coordinates
    aggregated = torch.zeros(out.numel(), dtype=torch.bool, device=device)
    aggregated[indices] = True
    zeroed = [selection[aggregated[selection]] for selection in selections]
    if threshold is None:  # a recompute step: the method may look the matches up as released
        looked_up = [m.residual_matches(s, kept_order, step) for m, s in zip(methods, selections)]
        zeroed = [z if found is None else found for z, found in zip(zeroed, looked_up)]
    clock.mark("scatter")
    return ExchangeResult(sizes.sum(dim=1).cpu(), int(indices.numel()), zeroed)


def _owner_sums(received: dict[int, list[torch.Tensor]], sizes: torch.Tensor, bounds: torch.Tensor,
                comm: RankCollectives, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, int]:
    """The hosted owners' region sums, over their span [B_first, B_last+1) (returned with its
    start). Owner j adds its sources in the released order j, j-1, ..., j-W+1 (shift s = 0, 1,
    ...): one index_add_ per shift over every hosted owner's pairs of that shift, whose indices
    are distinct (one owner per region, one source per owner and shift), so each sum is the same
    sequence of float additions however the ranks are hosted, on any device."""
    world_size, owners = comm.world_size, comm.local_ranks
    start, end = int(bounds[owners[0]]), int(bounds[owners[-1] + 1])
    sums = torch.zeros(end - start, dtype=dtype, device=device)
    by_shift = [torch.cat([received[j][(j - shift) % world_size] for j in owners]) for shift in range(world_size)]
    for rows in by_shift:
        indices, values = unpacked(rows, dtype)
        sums.index_add_(0, indices.long() - start, values)
    return sums, start
