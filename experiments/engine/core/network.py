"""The network model: what the collectives of a step would cost on a given cluster.

A cluster is N nodes of gpus_per_node (g) GPUs, an intra-node link (NVLink, PCIe) and an
inter-node link (Ethernet, InfiniBand), each alpha (latency) + beta (bandwidth); cluster.py says
where W ranks sit, collective_costs.py holds one function per collective and algorithm, each with
its formula (all of them in docs/network.md). `algorithm` chooses among them:

| algorithm    | all-reduce                 | all-gather(v)                         | broadcast                           |
|--------------|----------------------------|---------------------------------------|-------------------------------------|
| ring         | flat ring                  | flat ring                             | binomial tree                       |
| hierarchical | hierarchical ring          | hierarchical                          | binomial tree                       |
| tree         | NCCL double binary tree    | flat ring (no tree variant)           | binomial tree                       |
| auto         | the cheapest of the three  | the cheapest of ring, hierarchical    | binomial or pipelined ring, cheaper |
|              |                            | and Bruck (log-latency)               |                                     |

`auto` is what NCCL's tuner does (the algorithm its model says is fastest, per size); the model
is an idealisation of NCCL's, not NCCL's. `ring`, the default, on a network of one GPU per node
(no intra link) at efficiency 1 is the flat alpha-beta model of before, to the last bit:

- ring all-gather, m bytes per rank:  (W - 1) * (alpha + m / beta)
- ring all-reduce, n bytes:           2 (W - 1) * (alpha + n / (W * beta))
- binomial-tree broadcast, n bytes:   ceil(log2 W) * (alpha + n / beta)

so runs made before the cluster model keep their meaning. beta is the line rate times the
link's `efficiency` (inter; `intra_efficiency` inside a node): what NCCL reaches of the line rate
(nccl-tests bus bandwidth over line rate; the presets cite their sources), and the inter-node
line rate is one NIC's times `nics_per_node`. A step's modelled exchange time is
`price(ledger, W)`: the sum over the collectives it issued (TrafficMeter.collectives), logged as
`time/exchange_model_ms` beside the measured `time/exchange_ms`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from experiments.engine.core import collective_costs as costs
from experiments.engine.core.cluster import Link, Placement
from experiments.engine.core.ledger import Collective
from experiments.runformat.errors import ConfigError


ALGORITHMS = ("auto", "ring", "hierarchical", "tree")
PRESETS = Path(__file__).resolve().parents[3] / "conf" / "network"  # experiments/engine/core/ is three below


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class NetworkModel:
    name: str
    latency_us: float  # inter-node alpha, per message
    bandwidth_gbit: float  # inter-node beta, per node and direction, in Gbit/s
    gpus_per_node: int = 1
    intra_latency_us: float | None = None  # intra-node alpha; None when gpus_per_node is 1
    intra_bandwidth_gbit: float | None = None  # intra-node beta, per GPU and direction
    algorithm: str = "ring"
    efficiency: float = 1.0  # fraction of the inter-node line rate a collective reaches, in (0, 1]
    intra_efficiency: float = 1.0  # the same for the intra-node link
    nics_per_node: int = 1  # bandwidth_gbit is one NIC's; a node's flows share all its NICs
    bf16: bool = True  # the nodes' GPUs have bf16 (V100: no; the 16-bit dense baseline is then fp16)

    def __post_init__(self) -> None:
        if not (_number(self.latency_us) and self.latency_us >= 0):
            raise ConfigError(f"network.latency_us must be >= 0, got {self.latency_us}: set e.g. network.latency_us=25")
        if not (_number(self.bandwidth_gbit) and self.bandwidth_gbit > 0):
            raise ConfigError(
                f"network.bandwidth_gbit must be > 0, got {self.bandwidth_gbit}: set e.g. network.bandwidth_gbit=10"
            )
        if not (isinstance(self.gpus_per_node, int) and not isinstance(self.gpus_per_node, bool) and self.gpus_per_node >= 1):
            raise ConfigError(f"network.gpus_per_node must be an integer >= 1, got {self.gpus_per_node}: set e.g. network.gpus_per_node=1")
        if self.intra_latency_us is not None and not (_number(self.intra_latency_us) and self.intra_latency_us >= 0):
            raise ConfigError(f"network.intra_latency_us must be >= 0 or null, got {self.intra_latency_us}: "
                              "set e.g. network.intra_latency_us=5")
        if self.intra_bandwidth_gbit is not None and not (_number(self.intra_bandwidth_gbit) and self.intra_bandwidth_gbit > 0):
            raise ConfigError(f"network.intra_bandwidth_gbit must be > 0 or null, got {self.intra_bandwidth_gbit}: "
                              "set e.g. network.intra_bandwidth_gbit=2400")
        if self.gpus_per_node > 1 and (self.intra_latency_us is None or self.intra_bandwidth_gbit is None):
            missing = "network.intra_latency_us" if self.intra_latency_us is None else "network.intra_bandwidth_gbit"
            raise ConfigError(
                f"{missing} is null but network.gpus_per_node={self.gpus_per_node} needs an intra-node link: set "
                "network.intra_latency_us and network.intra_bandwidth_gbit (e.g. 5 and 2400 for NVLink 2), "
                "or network.gpus_per_node=1"
            )
        for key, value in (("efficiency", self.efficiency), ("intra_efficiency", self.intra_efficiency)):
            if not (_number(value) and 0 < value <= 1):
                raise ConfigError(f"network.{key} must be in (0, 1], got {value}: set it to the fraction of the "
                                  f"line rate NCCL reaches (e.g. network.{key}=0.9), or 1 for the line rate")
        if not (isinstance(self.nics_per_node, int) and not isinstance(self.nics_per_node, bool) and self.nics_per_node >= 1):
            raise ConfigError(f"network.nics_per_node must be an integer >= 1, got {self.nics_per_node}: "
                              "set e.g. network.nics_per_node=8 (a DGX node)")
        if not isinstance(self.bf16, bool):
            raise ConfigError(f"network.bf16 must be true or false, got {self.bf16!r}: set network.bf16=false "
                              "for GPUs without bf16 (V100)")
        if self.algorithm not in ALGORITHMS:
            raise ConfigError(f"network.algorithm must be one of {', '.join(ALGORITHMS)}, got {self.algorithm!r}: "
                              "set e.g. network.algorithm=auto")

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    def from_config(cls, node) -> "NetworkModel":
        """From a run's `network` node (conf/network/, or `OmegaConf.load(path)`); raises
        ConfigError on a bad value. Keys the node lacks take the defaults above."""
        get = node.get if hasattr(node, "get") else lambda key, default=None: getattr(node, key, default)
        return cls(node.name, node.latency_us, node.bandwidth_gbit, get("gpus_per_node", 1),
                   get("intra_latency_us", None), get("intra_bandwidth_gbit", None), get("algorithm", "ring"),
                   get("efficiency", 1.0), get("intra_efficiency", 1.0), get("nics_per_node", 1), get("bf16", True))

    @classmethod
    def preset(cls, name_or_path: str | Path) -> "NetworkModel":
        """A preset by name (`conf/network/<name>.yaml`) or a YAML file's path, without Hydra."""
        from omegaconf import OmegaConf

        path = Path(name_or_path)
        if path.suffix not in (".yaml", ".yml"):
            path = PRESETS / f"{name_or_path}.yaml"
        if not path.is_file():
            options = ", ".join(sorted(p.stem for p in PRESETS.glob("*.yaml")))
            raise ConfigError(f"network={name_or_path}: no such preset; choose one of: {options}, or a YAML file's path")
        return cls.from_config(OmegaConf.load(path))

    # -- the cluster ----------------------------------------------------------------------------
    @property
    def inter(self) -> Link:
        """The node's NICs together, at the rate a collective reaches: nics * line rate * efficiency
        (one rank per node and efficiency 1: the line rate itself, to the bit)."""
        rate = self.bandwidth_gbit * self.nics_per_node
        return Link(self.latency_us, rate if self.efficiency == 1 else rate * self.efficiency)

    @property
    def intra(self) -> Link | None:
        if self.intra_latency_us is None or self.intra_bandwidth_gbit is None:
            return None
        rate = self.intra_bandwidth_gbit
        return Link(self.intra_latency_us, rate if self.intra_efficiency == 1 else rate * self.intra_efficiency)

    def placement(self, world_size: int) -> Placement:
        return Placement.of(world_size, self.gpus_per_node, self.intra, self.inter)

    # kept for callers of the flat model: the inter-node link's numbers
    @property
    def alpha_s(self) -> float:
        return self.inter.alpha_s

    @property
    def bytes_per_s(self) -> float:
        return self.inter.bytes_per_s

    def message_s(self, nbytes: float) -> float:
        return self.inter.message_s(nbytes)

    # -- collectives ----------------------------------------------------------------------------
    def all_reduce_algorithm(self, world_size: int, nbytes: float) -> str:
        """ring, hierarchical or tree: the pinned one, or under auto the cheapest for this size
        (ties go to the ring, then hierarchical)."""
        if self.algorithm != "auto":
            return self.algorithm
        c = self.placement(world_size)
        return min(costs.ALL_REDUCE, key=lambda name: costs.ALL_REDUCE[name](c, nbytes))

    def all_reduce_s(self, world_size: int, nbytes: float) -> float:
        return costs.ALL_REDUCE[self.all_reduce_algorithm(world_size, nbytes)](self.placement(world_size), nbytes)

    def all_gather_algorithm(self, world_size: int, bytes_per_rank: float) -> str:
        """ring, hierarchical or bruck: ring when pinned to ring or tree (no tree all-gather),
        hierarchical when pinned to it, under auto the cheapest for this size (ties: the ring,
        then hierarchical)."""
        if self.algorithm != "auto":
            return "hierarchical" if self.algorithm == "hierarchical" else "ring"
        c = self.placement(world_size)
        return min(costs.ALL_GATHER, key=lambda name: costs.ALL_GATHER[name](c, bytes_per_rank))

    def all_gather_s(self, world_size: int, bytes_per_rank: float) -> float:
        algorithm = self.all_gather_algorithm(world_size, bytes_per_rank)
        return costs.ALL_GATHER[algorithm](self.placement(world_size), bytes_per_rank)

    def broadcast_s(self, world_size: int, nbytes: float) -> float:
        c = self.placement(world_size)
        if self.algorithm == "auto":
            return min(f(c, nbytes) for f in costs.BROADCAST.values())
        return costs.binomial_broadcast_s(c, nbytes)

    def all_to_all_s(self, world_size: int, bytes_per_pair: float) -> float:
        return costs.all_to_all_s(self.placement(world_size), bytes_per_pair)

    def point_to_point_s(self, world_size: int, nbytes: float, source: int, destination: int) -> float:
        return costs.point_to_point_s(self.placement(world_size), nbytes, source, destination)

    def tree_round_s(self, world_size: int, nbytes: float, stride: int) -> float:
        return costs.tree_round_s(self.placement(world_size), nbytes, stride)

    def shift_round_s(self, world_size: int, nbytes: float, shift: int) -> float:
        return costs.shift_round_s(self.placement(world_size), nbytes, shift)

    # -- a step's ledger ------------------------------------------------------------------------
    def collective_s(self, collective: Collective, world_size: int) -> float:
        """One ledger entry (ledger.Collective): `elements` is per rank for all_gather, per
        (source, destination) pair for all_to_all, per message for tree_round (whose `root` is
        its stride), the largest message for shift_round (`root`: its shift) and all_gather_v,
        the whole tensor otherwise. An all_gather_v is priced as an all-gather of its largest
        block m, an upper bound for every algorithm: a ring step forwards one block per rank, so it
        lasts as long as the largest; Bruck's step i forwards min(2^i, W - 2^i) blocks, at most
        that many times m; the hierarchical phases move p and N blocks, at most p m and N m."""
        nbytes = collective.elements * collective.element_bytes
        op = collective.op
        if op == "all_reduce":
            return self.all_reduce_s(world_size, nbytes)
        if op in ("all_gather", "all_gather_v"):
            return self.all_gather_s(world_size, nbytes)
        if op == "broadcast":
            return self.broadcast_s(world_size, nbytes)
        if op == "all_to_all":
            return self.all_to_all_s(world_size, nbytes)
        if op == "point_to_point":
            return self.point_to_point_s(world_size, nbytes, collective.root, collective.peer)
        if op == "tree_round":
            return self.tree_round_s(world_size, nbytes, collective.root)
        if op == "shift_round":
            return self.shift_round_s(world_size, nbytes, collective.root)
        raise ValueError(f"unknown collective {op!r}")

    def price(self, collectives: Iterable[Collective], world_size: int) -> float:
        """Seconds for a step's ledger: the sum of its collectives' times, in the order issued
        (they run one after another; nothing overlaps in the model)."""
        return sum((self.collective_s(c, world_size) for c in collectives), 0.0)
