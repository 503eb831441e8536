"""Collectives among W logical ranks, hosted `W / P` to a process, with traffic recorded.

Every exchange talks to ranks through this class and nothing else. With one process (P = 1) all
ranks are local and no torch.distributed call is made; with P > 1 the process group carries the
data between processes. Either way the traffic of all W ranks is recorded as if each were its
own process (see traffic.py), so hosted and distributed runs count the same bytes.

Ranks are laid out contiguously: process p hosts ranks [p * L, (p + 1) * L), L = W / P.

Value reductions (`sum_over_ranks`) come in two modes, the run's `reduction` key:

- ring (the default): the process sums its hosted ranks in rank order, then gloo's ring
  all-reduce sums the P partial sums. Float addition is not associative, and the ring adds in
  an order that depends on P and on each element's chunk, so hosted and distributed runs agree
  to rounding only; thresholds and top-k decisions amplify that last bit into different
  selections after some steps.
- rank_order: every rank's own tensor is gathered and every process sums the W of them in rank
  order 0, 1, ..., W-1, so the sum is bit for bit the same however the ranks are hosted. It is
  metered as the all-gather it is, (W-1)*m per rank instead of the all-reduce's 2(W-1)/W*m, and
  holds the W gathered tensors in memory while it sums.

A value sum may be metered at a wire element size other than the tensor's own
(`wire_element_bytes`): the dense exchange's bf16/fp16 contributions are rounded to 16 bits,
but travel here as the float32 values they are equal to (gloo sums them in fp32, one rounding
for every hosting), while the meter and the network model count the 2-byte wire format.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist

from experiments.engine.core.collective_costs import shift_pairs, tree_round_pairs
from experiments.engine.core.network import NetworkModel
from experiments.engine.core.traffic import TrafficMeter
from experiments.runformat.errors import require

REDUCTIONS = ("ring", "rank_order")


def check_reduction(reduction: str) -> None:
    """The one check of a `reduction` value (run.py's validation, the DDP hook, RankCollectives):
    raises ConfigError naming the key."""
    require(reduction in REDUCTIONS,
            f"reduction must be ring or rank_order, got {reduction}: ring is the default, "
            "rank_order sums every value reduction in rank order (bitwise equal hosted or distributed)")


class RankCollectives:
    """Rank-level all-gather, all-reduce, broadcast, tree rounds and uneven all-to-all and
    all-gather for the ranks this process hosts."""

    def __init__(
        self,
        world_size: int,
        local_ranks: list[int],
        use_process_group: bool,
        network: NetworkModel | None = None,
        reduction: str = "ring",
    ) -> None:
        check_reduction(reduction)
        self.reduction = reduction
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

    def all_reduce_sum(self, local_sum: torch.Tensor, wire_element_bytes: int | None = None) -> torch.Tensor:
        """The sum over all W ranks, given the sum over this process's ranks (in place);
        metered at `wire_element_bytes` per element (None: the tensor's element size)."""
        self.meter.all_reduce(local_sum.numel(), wire_element_bytes or local_sum.element_size())
        if self.processes > 1:
            dist.all_reduce(local_sum, op=dist.ReduceOp.SUM)
        return local_sum

    def sum_over_ranks(self, parts: list[torch.Tensor], out: torch.Tensor | None = None,
                       wire_element_bytes: int | None = None) -> torch.Tensor:
        """The sum over all W ranks of each rank's tensor, on every rank. `parts`: the hosted
        ranks' tensors, in rank order; the sum goes into `out` (which may be parts[0]), or into
        a new tensor when `out` is None. The mode is `reduction` (module docstring); the meter
        counts `wire_element_bytes` per element (None: the tensors' element size)."""
        if self.reduction == "ring":
            return self.all_reduce_sum(sum_in_rank_order(out, parts), wire_element_bytes)
        self.meter.all_gather(parts[0].numel(), wire_element_bytes or parts[0].element_size())
        if self.processes == 1:
            return sum_in_rank_order(out, parts)  # all W ranks are here, in rank order
        # Every rank's own tensor, not the process's partial sum: (a0+a1)+(a2+a3) != ((a0+a1)+a2)+a3.
        local = torch.stack(parts)  # a copy: `out` may be parts[0]
        per_process = [torch.empty_like(local) for _ in range(self.processes)]
        dist.all_gather(per_process, local)
        rows = [row for block in per_process for row in block.unbind(0)]  # rank order 0..W-1
        return sum_in_rank_order(out if out is not None else torch.empty_like(parts[0]), rows)

    def sum_gathered_over_ranks(self, accs: list[torch.Tensor], indices: torch.Tensor) -> torch.Tensor:
        """`sum_over_ranks` of every hosted rank's acc[indices], into one new tensor. Where the
        process may sum its ranks itself (ring, or every rank hosted here) it adds each rank's
        gather into one buffer in rank order through one scratch buffer, the same additions as
        gathering all L first (which held L copies of |indices|: gigabytes at W = 64-256)."""
        if self.reduction == "rank_order" and self.processes > 1:
            gathered = [acc.index_select(0, indices) for acc in accs]  # each rank's own, for the gather
            return self.sum_over_ranks(gathered, gathered[0])
        total = accs[0].index_select(0, indices)
        scratch = torch.empty_like(total) if len(accs) > 1 else None
        for acc in accs[1:]:
            total.add_(torch.index_select(acc, 0, indices, out=scratch))
        return self.sum_over_ranks([total], total)

    def broadcast(self, tensor: torch.Tensor | None, root: int, dtype: torch.dtype, device: torch.device,
                  shape: tuple[int, ...] | None = None) -> torch.Tensor:
        """A tensor from rank `root` to all ranks; `tensor` is read only where `root` is hosted.
        A 1-D tensor of any length goes after a one-element size header; a tensor whose `shape`
        every rank knows goes alone, metered as shape[0] elements of the other dimensions' bytes
        (gTop-k's k (index, value) pairs, a plan of known length: `LeaderPlan.plan_length`).
        A root tensor of another shape than the one announced is refused: the other ranks would
        receive a buffer of the wrong size."""
        is_root_here = root in self.local_ranks
        if shape is not None and is_root_here and tuple(tensor.shape) != tuple(shape):
            raise ValueError(f"rank {root} broadcasts a tensor of shape {tuple(tensor.shape)}, "
                             f"but every rank expects {tuple(shape)}")
        if shape is None:
            header = torch.tensor([tensor.numel() if is_root_here else 0], dtype=torch.int64, device=device)
            self.meter.broadcast(1, header.element_size(), root)
            if self.processes > 1:
                dist.broadcast(header, src=self.process_of(root))
            shape = (int(header.item()),)
        # The root's tensor may be built on the CPU (DEFT's and Accordion's plans): NCCL carries
        # only tensors on the group's device, so the payload goes there before it is sent.
        payload = (tensor.to(device=device, dtype=dtype) if is_root_here
                   else torch.empty(shape, dtype=dtype, device=device))
        self.meter.broadcast(shape[0], _row_bytes(shape, dtype), root)
        if self.processes > 1:
            dist.broadcast(payload, src=self.process_of(root))
        return payload

    def tree_round(self, outgoing: dict[int, torch.Tensor], stride: int, shape: tuple[int, ...], dtype: torch.dtype,
                   device: torch.device) -> dict[int, torch.Tensor]:
        """One round of a binomial-tree reduce toward rank 0 (gTop-k's merge): every rank r with
        r mod 2 stride = stride sends its message of `shape` to r - stride, metered as shape[0]
        elements of the other dimensions' bytes. `outgoing`: the hosted senders' messages, by
        rank; returns the hosted receivers' messages, by rank. Pairs on one process hand the
        tensor over; the others go point to point, all at once. With W a power of 2 (so L too)
        a process holds at most one pair that crosses processes."""
        self.meter.tree_round(shape[0], _row_bytes(shape, dtype), stride)
        received: dict[int, torch.Tensor] = {}
        requests = []
        for source, destination in tree_round_pairs(stride, self.world_size):
            if source in self.local_ranks and destination in self.local_ranks:
                received[destination] = outgoing[source]
            elif source in self.local_ranks:
                requests.append(dist.isend(outgoing[source].contiguous(), dst=self.process_of(destination)))
            elif destination in self.local_ranks:
                received[destination] = torch.empty(shape, dtype=dtype, device=device)
                requests.append(dist.irecv(received[destination], src=self.process_of(source)))
        for request in requests:
            request.wait()
        return received

    def all_to_all_counts(self, local_counts: torch.Tensor) -> torch.Tensor:
        """Every rank's message sizes to every rank ([L, W] int rows, hosted ranks in order ->
        [W, W], row r what rank r sends to each rank). Metered as the algorithm's all-to-all of
        one int32 per pair, after which each rank knows what it will receive; the harness hands
        every process the whole matrix (unmetered), so that each meters all W ranks' rounds."""
        self.meter.all_to_all(1, 4)
        return self._gather(local_counts.to(torch.int64))

    def all_to_all_v(self, outgoing: dict[int, list[torch.Tensor]], sizes: torch.Tensor, row_bytes: int,
                     device: torch.device) -> dict[int, list[torch.Tensor]]:
        """Uneven all-to-all of uint8 rows of `row_bytes` (Ok-Topk's reduce-scatter):
        `outgoing[r][j]` is hosted rank r's message to rank j, `sizes[r, j]` rows (the matrix
        every rank holds, `all_to_all_counts`); returns, for every hosted rank j, the W messages
        it receives (by source). Metered as W - 1 shift rounds (s = 1..W-1: rank r to r + s,
        sizes[r, r + s] rows each); a rank's message to itself is a local copy. Messages between
        hosted ranks are handed over; for each other process, one message carries all the pairs
        between the two, concatenated in (source, destination) order, all posted in one batch
        (NCCL deadlocks on a send and a receive with one peer outside a group)."""
        W, counts = self.world_size, sizes.tolist()
        for shift in range(1, W):
            self.meter.shift_round([counts[r][destination] for r, destination in shift_pairs(shift, W)], row_bytes, shift)
        received = {j: [None] * W for j in self.local_ranks}
        for r in self.local_ranks:
            for j in self.local_ranks:
                received[j][r] = outgoing[r][j]
        if self.processes == 1:
            return received
        me, operations, inbound = self.process_of(self.local_ranks[0]), [], {}
        for other in range(self.processes):
            if other == me:
                continue
            theirs = range(other * self.local_size, (other + 1) * self.local_size)
            parts = [outgoing[r][j] for r in self.local_ranks for j in theirs]
            if sum(part.shape[0] for part in parts):
                operations.append(dist.P2POp(dist.isend, torch.cat(parts).contiguous(), other))
            rows = sum(counts[r][j] for r in theirs for j in self.local_ranks)
            if rows:
                inbound[other] = torch.empty((rows, row_bytes), dtype=torch.uint8, device=device)
                operations.append(dist.P2POp(dist.irecv, inbound[other], other))
        for request in dist.batch_isend_irecv(operations) if operations else ():
            request.wait()
        for other, message in inbound.items():
            offset = 0
            for r in range(other * self.local_size, (other + 1) * self.local_size):
                for j in self.local_ranks:
                    rows = counts[r][j]
                    received[j][r] = message[offset:offset + rows]
                    offset += rows
        for other in range(self.processes):  # pairs with nothing to send: empty messages, no traffic
            for r in range(other * self.local_size, (other + 1) * self.local_size):
                for j in self.local_ranks:
                    if received[j][r] is None:
                        received[j][r] = torch.empty((0, row_bytes), dtype=torch.uint8, device=device)
        return received

    def all_gather_v(self, local_rows: list[torch.Tensor], sizes: list[int], row_bytes: int,
                     device: torch.device) -> list[torch.Tensor]:
        """Uneven all-gather (MPI's Allgatherv) of uint8 rows of `row_bytes`: `local_rows` are the
        hosted ranks' blocks, `sizes` every rank's block length (known to all from a size
        all-gather); returns all W blocks, in rank order. Metered as the ring all-gatherv of the
        exact sizes; gloo has no all-gatherv, so between processes the blocks travel padded to
        the largest, which the meter leaves out (the algorithm's wire format is what it counts,
        as for the 16-bit dense values carried in float32)."""
        self.meter.all_gather_v(sizes, row_bytes)
        if self.processes == 1:  # every block is here
            return list(local_rows)
        width = max(sizes)
        if width == 0:  # no block anywhere: nothing to send
            return [torch.empty((0, row_bytes), dtype=torch.uint8, device=device) for _ in range(self.world_size)]
        padded = torch.zeros((self.local_size, width, row_bytes), dtype=torch.uint8, device=device)
        for row, block in enumerate(local_rows):
            padded[row, :block.shape[0]] = block
        gathered = self._gather(padded)
        return [gathered[rank, :sizes[rank]] for rank in range(self.world_size)]

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


def _row_bytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    """Bytes of one element along the first dimension: a row of the other dimensions."""
    return math.prod(shape[1:]) * dtype.itemsize


def sum_in_rank_order(out: torch.Tensor | None, parts: list[torch.Tensor]) -> torch.Tensor:
    """Sums hosted ranks' tensors in rank order (a fixed order keeps runs repeatable) into `out`
    (which may be parts[0] itself: summed in place), or into a new tensor when `out` is None."""
    total = parts[0].clone() if out is None else out if out is parts[0] else out.copy_(parts[0])
    for part in parts[1:]:
        total.add_(part)
    return total
