"""What every exchange family shares: the step's request, the result, and the size header and
padding of the exchanges that gather index lists (index_set.py, allgather.py).

Indices travel as int32 (every model here has fewer than 2**31 gradient elements), values in the
accumulator's dtype; padding and size headers are sent and counted like everything else. The
size header (every rank's |S_r|, all-gathered before the indices) is sent only when the counts
vary with the data: a method whose counts every rank knows before the exchange (Top-k's k, the
counts a shared plan fixes: `Sparsifier.known_counts`) passes them as `counts`, and the union and
sparse all-gather exchanges skip the header, checking the hosted ranks' selections against them.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from experiments.engine.core.collectives import RankCollectives
from experiments.engine.core.packing import INDEX_DTYPE
from experiments.engine.core.phases import NO_CLOCK, PhaseClock
from sparsifiers.common.base import Sparsifier

PAD = -1  # index padding: never a valid coordinate


@dataclass(frozen=True)
class ExchangeRequest:
    """One step's exchange for the ranks this process hosts (lists in hosted-rank order). Each
    family reads what it needs and says clearly what is missing."""

    selections: list[torch.Tensor | None]  # S_r (None: every coordinate)
    accs: list[torch.Tensor]  # acc_r, read only
    out: torch.Tensor  # the aggregate, written (identical on every rank)
    comm: RankCollectives
    # The hosted ranks' sparsifiers: dense reads their wire dtype (capabilities.WireRounding;
    # fp32 without), low_rank and sparse_reduce_scatter call their hooks (LowRank, RegionOwner).
    methods: list[Sparsifier] | None = None
    step: int = 0  # low_rank: the vanilla steps before compression; sparse_reduce_scatter: the schedule
    leader: int | None = None  # leader_broadcast: the selecting rank
    # union_allreduce only: the indices every rank adds to the union unexchanged (SharedIndices).
    shared: torch.Tensor | None = None
    # union_allreduce and sparse_allgather only: every rank's |S_r| when every rank knows them
    # before the exchange (`Sparsifier.known_counts`): no size header is sent; None: it is.
    counts: list[int] | None = None
    clock: PhaseClock = NO_CLOCK  # times the phases (the step benchmark)


@dataclass
class ExchangeResult:
    """What the exchange did: the same on every rank, except `zeroed` (per hosted rank)."""

    counts: torch.Tensor  # int64 [W]: |S_r| of every rank
    aggregated: int  # |U|
    zeroed: list[torch.Tensor | None]  # per hosted rank: residual coordinates to zero (None: all)
    shared: int = 0  # |C|: coordinates of U added by every rank unexchanged (in no rank's S_r)
    # Set by the low-rank exchange: every hosted rank's residual becomes acc - this (the
    # aggregate) instead of acc with `zeroed` zeroed (experiments/engine/core/error_feedback.py).
    subtracted: torch.Tensor | None = None


def rank_counts(selections: list[torch.Tensor], comm: RankCollectives, device: torch.device,
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


def hosted(counts: torch.Tensor, comm: RankCollectives) -> torch.Tensor:
    """The hosted ranks' entries of `counts` (contiguous ranks: a slice, no copy)."""
    return counts[comm.local_ranks[0]: comm.local_ranks[0] + comm.local_size]


def valid(counts: torch.Tensor, width: int) -> torch.Tensor:
    """[ranks, width] bool: position j of row r holds one of rank r's |S_r| entries."""
    return torch.arange(width, device=counts.device) < counts[:, None]


def padded(parts: list[torch.Tensor], sizes: torch.Tensor, width: int, fill: int, dtype: torch.dtype,
           device: torch.device) -> torch.Tensor:
    """The parts as the rows of a [len(parts), width] tensor, each padded with `fill`: one fill
    and one masked copy (row-major, so part r lands in row r), not a copy per row."""
    rows = torch.full((len(parts), width), fill, dtype=dtype, device=device)
    if width > 0:
        rows.masked_scatter_(valid(sizes, width), torch.cat(parts).to(dtype))
    return rows


def padded_rows(selections: list[torch.Tensor], sizes: torch.Tensor, width: int, device: torch.device) -> torch.Tensor:
    """Padding: gloo rejects uneven all_gather, so every rank sends `width` indices."""
    return padded(selections, sizes, width, PAD, INDEX_DTYPE, device)
