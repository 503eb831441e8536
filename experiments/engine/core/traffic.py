"""Traffic accounting: what each of W logical ranks sends and receives, per collective.

Sizes come from the collectives the exchange really issues (values, indices, padding and size
headers), turned into per-rank bytes with the standard algorithms' formulas:

- ring all-gather of m elements per rank: every rank sends and receives (W-1)*m;
- ring all-reduce of m elements: every rank sends and receives 2(W-1)/W * m;
- binomial-tree broadcast of m elements: every non-root rank receives m once; a rank sends m to
  each of its children (the root has ceil(log2 W) of them);
- all-to-all of m elements per (source, destination) pair: every rank sends and receives (W-1)*m;
- point-to-point of m elements: the source sends m, the destination receives m;
- a tree round of stride s (one round of a binomial-tree reduce toward rank 0, gTop-k's merge):
  every rank r with r mod 2s = s sends m to r - s, all pairs at once;
- a shift round of shift s (one round of Ok-Topk's reduce-scatter): every rank r sends m_r to
  r + s mod W, all at once, the sizes uneven;
- a ring all-gatherv of m_r elements from rank r: over W - 1 steps rank r forwards every block
  but its successor's, so it sends T - m_(r+1) and receives T - m_r (T = sum of the m_r).

These bytes are the flat algorithms' whatever network the run models. The modelled time is
`NetworkModel.price` over the ledger (`collectives`): one accounting, priced, never a second one.

Hosted ranks are counted as the W ranks they stand for, so a run's traffic does not depend on
how many processes hosted it.
"""
from __future__ import annotations

import numpy as np

from experiments.engine.core.collective_costs import shift_pairs, tree_round_pairs
from experiments.engine.core.ledger import Collective
from experiments.engine.core.network import NetworkModel


def binomial_children(relative_rank: int, world_size: int) -> int:
    """How many ranks `relative_rank` (0 = root) forwards to in a binomial-tree broadcast."""
    children, span = 0, 1
    while span < world_size:
        if relative_rank < span and relative_rank + span < world_size:
            children += 1
        span *= 2
    return children


class TrafficMeter:
    """Accumulates bytes sent and received per logical rank since the last `reset`, and the
    time the network model says those collectives take."""

    def __init__(self, world_size: int, network: NetworkModel | None = None) -> None:
        self.world_size = world_size
        self.network = network
        self.sent = np.zeros(world_size)
        self.recv = np.zeros(world_size)
        self.collectives: list[Collective] = []  # since the last reset, in the order issued

    def reset(self) -> None:
        self.sent[:] = 0.0
        self.recv[:] = 0.0
        self.collectives = []

    @property
    def model_s(self) -> float:
        """The network model's time for the collectives since the last reset: the ledger, priced."""
        return self.network.price(self.collectives, self.world_size) if self.network else 0.0

    def all_gather(self, elements_per_rank: int, element_bytes: int) -> None:
        self.collectives.append(Collective("all_gather", elements_per_rank, element_bytes))
        nbytes = (self.world_size - 1) * elements_per_rank * element_bytes
        self.sent += nbytes
        self.recv += nbytes

    def all_reduce(self, elements: int, element_bytes: int) -> None:
        self.collectives.append(Collective("all_reduce", elements, element_bytes))
        nbytes = 2.0 * (self.world_size - 1) / self.world_size * elements * element_bytes
        self.sent += nbytes
        self.recv += nbytes

    def broadcast(self, elements: int, element_bytes: int, root: int) -> None:
        self.collectives.append(Collective("broadcast", elements, element_bytes, root))
        nbytes = elements * element_bytes
        for rank in range(self.world_size):
            relative = (rank - root) % self.world_size
            self.sent[rank] += binomial_children(relative, self.world_size) * nbytes
            if relative != 0:
                self.recv[rank] += nbytes

    def all_to_all(self, elements_per_pair: int, element_bytes: int) -> None:
        self.collectives.append(Collective("all_to_all", elements_per_pair, element_bytes))
        nbytes = (self.world_size - 1) * elements_per_pair * element_bytes
        self.sent += nbytes
        self.recv += nbytes

    def point_to_point(self, elements: int, element_bytes: int, source: int, destination: int) -> None:
        self.collectives.append(Collective("point_to_point", elements, element_bytes, source, destination))
        self.sent[source] += elements * element_bytes
        self.recv[destination] += elements * element_bytes

    def tree_round(self, elements: int, element_bytes: int, stride: int) -> None:
        self.collectives.append(Collective("tree_round", elements, element_bytes, stride))
        for source, destination in tree_round_pairs(stride, self.world_size):
            self.sent[source] += elements * element_bytes
            self.recv[destination] += elements * element_bytes

    def shift_round(self, sizes: list[int] | None, element_bytes: int, shift: int, elements: int | None = None) -> None:
        """One round of uneven messages, rank r to r + shift: `sizes[r]` elements each, or
        `elements` from every rank (a replayed ledger knows only the largest)."""
        sizes = list(sizes) if sizes is not None else [elements] * self.world_size
        self.collectives.append(Collective("shift_round", max(sizes, default=0), element_bytes, shift, sizes=tuple(sizes)))
        for source, destination in shift_pairs(shift, self.world_size):
            self.sent[source] += sizes[source] * element_bytes
            self.recv[destination] += sizes[source] * element_bytes

    def all_gather_v(self, sizes: list[int] | None, element_bytes: int, elements: int | None = None) -> None:
        """A ring all-gather of uneven blocks: `sizes[r]` elements from rank r (or `elements`
        from every rank, a replayed ledger)."""
        sizes = np.array(sizes if sizes is not None else [elements] * self.world_size, dtype=np.float64)
        self.collectives.append(Collective("all_gather_v", int(sizes.max(initial=0)), element_bytes,
                                           sizes=tuple(int(s) for s in sizes)))
        if self.world_size > 1:
            total = sizes.sum()
            self.sent += (total - np.roll(sizes, -1)) * element_bytes  # all but the successor's block
            self.recv += (total - sizes) * element_bytes


def dense_allreduce_bytes(numel: int, world_size: int, element_bytes: int = 4) -> float:
    """Per-rank bytes of the dense allreduce of the same model: the `traffic/ratio` denominator."""
    return 2.0 * (world_size - 1) / world_size * numel * element_bytes
