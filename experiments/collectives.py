"""Collectives among W logical ranks, hosted `W / P` to a process, with traffic recorded.

Every exchange talks to ranks through this class and nothing else. With one process (P = 1) all
ranks are local and no torch.distributed call is made; with P > 1 the process group carries the
data between processes. Either way the traffic of all W ranks is recorded as if each were its
own process (see traffic.py), so hosted and distributed runs count the same bytes.

Ranks are laid out contiguously: process p hosts ranks [p * L, (p + 1) * L), L = W / P.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from experiments.network import NetworkModel
from experiments.traffic import TrafficMeter


class RankCollectives:
    """Rank-level all-gather, all-reduce and broadcast for the ranks this process hosts."""

    def __init__(
        self, world_size: int, local_ranks: list[int], use_process_group: bool, network: NetworkModel | None = None
    ) -> None:
        self.world_size = world_size
        self.local_ranks = local_ranks
        self.local_size = len(local_ranks)
        self.use_process_group = use_process_group and dist.is_available() and dist.is_initialized()
        self.processes = dist.get_world_size() if self.use_process_group else 1
        if self.local_size * self.processes != world_size:
            raise ValueError(f"{self.processes} processes x {self.local_size} ranks != {world_size} workers")
        self.meter = TrafficMeter(world_size, network)

    def process_of(self, rank: int) -> int:
        return rank // self.local_size

    # -- metered collectives: the exchange's own traffic ------------------------------------
    def all_gather(self, local_rows: torch.Tensor) -> torch.Tensor:
        """[L, m] rows, one per hosted rank -> [W, m], rank order. Rows must be equal-sized
        (callers pad: gloo rejects uneven all_gather)."""
        self.meter.all_gather(local_rows[0].numel(), local_rows.element_size())
        return self._gather(local_rows)

    def all_reduce_sum(self, local_sum: torch.Tensor) -> torch.Tensor:
        """The sum over all W ranks, given the sum over this process's ranks (in place)."""
        self.meter.all_reduce(local_sum.numel(), local_sum.element_size())
        if self.processes > 1:
            dist.all_reduce(local_sum, op=dist.ReduceOp.SUM)
        return local_sum

    def broadcast(self, tensor: torch.Tensor | None, root: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """A 1-D tensor from rank `root` to all ranks; a one-element size header goes first so
        receivers need not know the length. `tensor` is read only where `root` is hosted."""
        is_root_here = root in self.local_ranks
        header = torch.tensor([tensor.numel() if is_root_here else 0], dtype=torch.int64, device=device)
        self.meter.broadcast(1, header.element_size(), root)
        if self.processes > 1:
            dist.broadcast(header, src=self.process_of(root))
        length = int(header.item())
        payload = tensor.to(dtype) if is_root_here else torch.empty(length, dtype=dtype, device=device)
        self.meter.broadcast(length, payload.element_size(), root)
        if self.processes > 1:
            dist.broadcast(payload, src=self.process_of(root))
        return payload

    # -- unmetered: bookkeeping that is not part of the algorithm ----------------------------
    def gather_stats(self, local_rows: torch.Tensor) -> torch.Tensor:
        """All ranks' metric rows ([L, c] -> [W, c]); not counted as traffic."""
        return self._gather(local_rows)

    def _gather(self, local_rows: torch.Tensor) -> torch.Tensor:
        if self.processes == 1:
            return local_rows
        parts = [torch.empty_like(local_rows) for _ in range(self.processes)]
        dist.all_gather(parts, local_rows.contiguous())
        return torch.cat(parts, dim=0)
