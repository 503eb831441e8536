"""The cluster the network model prices collectives on: links, and where W ranks sit.

A link costs alpha + n / beta for a message of n bytes (alpha: latency, beta: bandwidth per
direction). A cluster has two links:

- intra: between two GPUs of one node (NVLink or PCIe), beta per GPU and direction;
- inter: between nodes (Ethernet or InfiniBand), beta per NODE and direction: every flow that
  leaves a node at the same time shares it (a node with k NICs has k times one NIC's beta: the
  rail-optimized DGX/HGX layout, every GPU its own NIC, NCCL's channels spread over all of them).

A Link's beta is what a collective reaches, not the line rate: network.py multiplies the line
rate by the link's efficiency (published nccl-tests bus bandwidths over line rate).

W ranks fill nodes in rank order, gpus_per_node (g) to a node: ranks [j*g, (j+1)*g) are node j.
So N = ceil(W / g) nodes, and p = min(g, W) ranks on a full node (W < g: one node with W GPUs).
When g does not divide W the last node is partial; the formulas use p, the fullest node, which
is the one a collective waits for.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Link:
    """alpha-beta cost of one message over one link."""

    latency_us: float  # alpha, microseconds per message
    bandwidth_gbit: float  # beta, Gbit/s per direction

    @property
    def alpha_s(self) -> float:
        return self.latency_us * 1e-6

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth_gbit * 1e9 / 8

    def message_s(self, nbytes: float) -> float:
        """alpha + n / beta."""
        return self.alpha_s + nbytes / self.bytes_per_s


@dataclass(frozen=True)
class Placement:
    """W ranks on a cluster: N nodes of p ranks (the fullest node), and the two links."""

    world_size: int  # W
    nodes: int  # N = ceil(W / g)
    per_node: int  # p = min(g, W)
    intra: Link | None  # None when no two ranks share a node (p == 1)
    inter: Link

    @classmethod
    def of(cls, world_size: int, gpus_per_node: int, intra: Link | None, inter: Link) -> "Placement":
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        per_node = min(gpus_per_node, world_size)
        if per_node > 1 and intra is None:
            raise ValueError(f"{per_node} ranks per node need an intra-node link")
        return cls(world_size, math.ceil(world_size / gpus_per_node), per_node, intra if per_node > 1 else None, inter)

    def node_of(self, rank: int) -> int:
        return rank // self.per_node

    def link_between(self, a: int, b: int) -> Link:
        """The link a message from rank a to rank b crosses."""
        return self.intra if self.node_of(a) == self.node_of(b) and self.intra is not None else self.inter

    def slowest_bytes_per_s(self) -> float:
        """The slowest link a pipelined stream through all ranks crosses."""
        rates = ([self.inter.bytes_per_s] if self.nodes > 1 else []) + ([self.intra.bytes_per_s] if self.intra else [])
        return min(rates)
