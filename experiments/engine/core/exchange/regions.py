"""Ok-Topk's exchange (ExchangeKind.SPARSE_REDUCE_SCATTER; docs/algorithms.md, "oktopk"): a sparse
reduce-scatter over W regions, then an all-gather of what the regions' owners keep. The method's
`capabilities.RegionOwner` hooks say where the regions lie and what the owners keep; the exchange
owns the collectives.

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

The paper's variant (the method's `balanced`) keeps exactly the k largest sums of all regions in
step 5 (`_global_top_k`) and rebalances the owners' blocks to about k / W a rank before step 6
(`_balanced`); its residual is the intersection.

Every owner's sum has one order whatever the hosting, so hosted and distributed runs are the
same bit for bit (warm-up steps aside: they sum as the run's `reduction` says).
"""
from __future__ import annotations

import torch

from experiments.engine.core.collectives import RankCollectives
from experiments.engine.core.exchange.dense import dense_allreduce
from experiments.engine.core.exchange.result import ExchangeRequest, ExchangeResult
from experiments.engine.core.packing import INDEX_DTYPE, packed, unpacked
from sparsifiers.common.capabilities import RegionOwner, require


def sparse_reduce_scatter(request: ExchangeRequest) -> ExchangeResult:
    """The module docstring's steps 1-7 for the hosted ranks (`request.methods`, `selections`
    and `accs` in hosted-rank order)."""
    methods = require(request.methods, RegionOwner, "sparse_reduce_scatter")
    selections, accs, out, comm, step, clock = (request.selections, request.accs, request.out, request.comm,
                                                request.step, request.clock)
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
    owned = bounds[comm.local_ranks[0]:comm.local_ranks[-1] + 2] - start
    threshold, kth_magnitude = method.owner_threshold(step), None
    if method.balanced:  # the paper's variant: exactly the k largest |sum| of all regions
        kept, kth_magnitude = _global_top_k(sums, owned.tolist(), comm, method.k)
        threshold = kth_magnitude if kth_magnitude is not None else 0.0  # not a recompute gather
    else:
        kept = torch.nonzero(sums != 0 if threshold is None else sums.abs() > threshold).view(-1)
    kept_pairs = packed((kept + start).to(INDEX_DTYPE), sums[kept])
    edges = torch.searchsorted(kept, owned).tolist()
    blocks = [kept_pairs[edges[i]:edges[i + 1]] for i in range(comm.local_size)]

    # 6. all-gather: the size header, then the blocks (the paper's variant first balances them)
    gathered_sizes = comm.all_gather(torch.tensor([[b.shape[0]] for b in blocks], dtype=INDEX_DTYPE, device=device))
    block_sizes = gathered_sizes.view(-1).tolist()
    if method.balanced:
        blocks, block_sizes = _balanced(blocks, block_sizes, comm, row_bytes, device)
    gathered = comm.all_gather_v(blocks, block_sizes, row_bytes, device)
    indices, values = unpacked(torch.cat(gathered), dtype)  # ascending: regions in order, each ascending
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


def _global_top_k(sums: torch.Tensor, owned: list[int], comm: RankCollectives, k: int) -> tuple[torch.Tensor, float | None]:
    """The paper's variant, step 5: the positions in `sums` (ascending) of exactly the k largest
    |sum| over every owner's region (ties at the k-th: the lower index; every non-zero sum when
    fewer are non-zero), without gathering the sums. A non-negative float's bits order as its
    value, so a binary search on them finds the k-th magnitude t: each probe is one all-reduce of
    one int64 count per rank (|sum| >= probe in its region). Then one all-gather of each owner's
    counts above and at t says which owner keeps how many of the ties. Returns the positions and
    t (None when fewer than k sums are non-zero)."""
    bits_dtype = {8: torch.int64, 4: torch.int32, 2: torch.int16}[sums.element_size()]
    bits = sums.abs().view(bits_dtype).to(torch.int64)
    spans = [(owned[i], owned[i + 1]) for i in range(comm.local_size)]

    def at_least(probe: int) -> int:
        parts = [(bits[a:b] >= probe).sum().view(1) for a, b in spans]
        return int(comm.sum_over_ranks(parts)[0])

    low, high = 1, 1 << (8 * sums.element_size() - 1)  # count(>= low) >= k is kept true, count(>= high) < k
    enough = at_least(low) >= k
    if enough:
        while high - low > 1:
            middle = (low + high) // 2
            if at_least(middle) >= k:
                low = middle
            else:
                high = middle
    counts = torch.stack([torch.stack([(bits[a:b] > low).sum(), (bits[a:b] == low).sum()]) for a, b in spans])
    every = comm.all_gather(counts).cpu()  # [W, 2]: each owner's count above t and at t
    need = k - int(every[:, 0].sum())
    ties_before = torch.cumsum(every[:, 1], 0) - every[:, 1]
    kept = [torch.nonzero(bits > low).view(-1)]
    for (a, b), rank in zip(spans, comm.local_ranks):
        take = max(0, min(int(every[rank, 1]), need - int(ties_before[rank])))
        kept.append(torch.nonzero(bits[a:b] == low).view(-1)[:take] + a)
    kth = float(torch.tensor([low], dtype=torch.int64).to(bits_dtype).view(sums.dtype)[0]) if enough else None
    return torch.sort(torch.cat(kept)).values, kth


def _balanced(blocks: list[torch.Tensor], sizes: list[int], comm: RankCollectives, row_bytes: int,
              device: torch.device) -> tuple[list[torch.Tensor], list[int]]:
    """The paper's data balancing: the owners' blocks, one stream in rank order, are cut again into
    W contiguous blocks of floor(G / W) pairs (one more for the first G mod W ranks) and each piece
    goes to its new holder, point to point (metered as shift rounds). Every rank knows every size
    from the count all-gather, so no header travels. Returns the hosted ranks' balanced blocks."""
    W, total = comm.world_size, sum(sizes)
    balanced = [total // W + (i < total % W) for i in range(W)]
    starts = [sum(sizes[:r]) for r in range(W)]
    targets = [sum(balanced[:i]) for i in range(W + 1)]
    moves = [[max(0, min(starts[r] + sizes[r], targets[i + 1]) - max(starts[r], targets[i])) for i in range(W)]
             for r in range(W)]
    outgoing = {}
    for rank, block in zip(comm.local_ranks, blocks):
        cut = [min(max(target - starts[rank], 0), sizes[rank]) for target in targets]  # its piece for rank i: cut[i]:cut[i+1]
        outgoing[rank] = [block[cut[i]:cut[i + 1]] for i in range(W)]
    received = comm.all_to_all_v(outgoing, torch.tensor(moves, dtype=torch.int64), row_bytes, device)
    return [torch.cat(received[j]) for j in comm.local_ranks], balanced
