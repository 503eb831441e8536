"""The alpha-beta network model: what the traffic of a step would cost on a given network.

A message of n bytes costs alpha + n / beta (alpha: latency, beta: bandwidth). With the same
algorithms the traffic accounting assumes (traffic.py), per collective over W ranks:

- ring all-gather, m bytes per rank:  (W - 1) * (alpha + m / beta)
- ring all-reduce, n bytes:           2 (W - 1) * (alpha + n / (W * beta))
- binomial-tree broadcast, n bytes:   ceil(log2 W) * (alpha + n / beta)

A step's modelled exchange time is the sum over the collectives it issued (the exchange's and
the leader plan's), logged as `time/exchange_model_ms` beside the measured `time/exchange_ms`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from experiments.errors import ConfigError


@dataclass(frozen=True)
class NetworkModel:
    name: str
    latency_us: float  # alpha, per message
    bandwidth_gbit: float  # beta, per link and direction, in Gbit/s

    def __post_init__(self) -> None:
        if not (isinstance(self.latency_us, (int, float)) and self.latency_us >= 0):
            raise ConfigError(f"network.latency_us must be >= 0, got {self.latency_us}: set e.g. network.latency_us=25")
        if not (isinstance(self.bandwidth_gbit, (int, float)) and self.bandwidth_gbit > 0):
            raise ConfigError(
                f"network.bandwidth_gbit must be > 0, got {self.bandwidth_gbit}: set e.g. network.bandwidth_gbit=10"
            )

    @classmethod
    def from_config(cls, node) -> "NetworkModel":
        """From a run's `network` node (conf/network/); raises ConfigError on a bad value."""
        return cls(node.name, node.latency_us, node.bandwidth_gbit)

    @property
    def alpha_s(self) -> float:
        return self.latency_us * 1e-6

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth_gbit * 1e9 / 8

    def message_s(self, nbytes: float) -> float:
        return self.alpha_s + nbytes / self.bytes_per_s

    def all_gather_s(self, world_size: int, bytes_per_rank: float) -> float:
        return (world_size - 1) * self.message_s(bytes_per_rank)

    def all_reduce_s(self, world_size: int, nbytes: float) -> float:
        return 2 * (world_size - 1) * self.message_s(nbytes / world_size) if world_size > 1 else 0.0

    def broadcast_s(self, world_size: int, nbytes: float) -> float:
        return math.ceil(math.log2(world_size)) * self.message_s(nbytes) if world_size > 1 else 0.0
