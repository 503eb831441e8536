"""The eight moves of the model's least certain inputs, each to one end of its stated range:

    alpha (every link's latency)     x0.5 and x2        nominal latencies, not measured ones
    beta efficiency (every link)     0.7 and 1          nccl-tests reach 70-96% of line rate
    compute                          -30% and +30%      a profile's FLOP fallback is far off
    selection                        -50% and +50%      one GPU measured, others modelled

breakeven.py models every step again under each move, the others as they were, and the
per-step speedup's range is its lowest and highest there. One input at a time: the ranges are
independent guesses, and their corners would compound them.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from experiments.engine.core.network import NetworkModel


@dataclass(frozen=True)
class Perturbation:
    label: str  # "alpha x2"
    network: Callable[[NetworkModel], NetworkModel]
    compute_scale: float = 1.0
    select_scale: float = 1.0


def _latency(factor: float) -> Callable[[NetworkModel], NetworkModel]:
    def scaled(network: NetworkModel) -> NetworkModel:
        intra = None if network.intra_latency_us is None else network.intra_latency_us * factor
        return replace(network, latency_us=network.latency_us * factor, intra_latency_us=intra)
    return scaled


def _efficiency(value: float) -> Callable[[NetworkModel], NetworkModel]:
    return lambda network: replace(network, efficiency=value, intra_efficiency=value)


def _same(network: NetworkModel) -> NetworkModel:
    return network


PERTURBATIONS = (
    Perturbation("alpha x0.5", _latency(0.5)),
    Perturbation("alpha x2", _latency(2.0)),
    Perturbation("beta efficiency 0.7", _efficiency(0.7)),
    Perturbation("beta efficiency 1", _efficiency(1.0)),
    Perturbation("compute -30%", _same, compute_scale=0.7),
    Perturbation("compute +30%", _same, compute_scale=1.3),
    Perturbation("selection -50%", _same, select_scale=0.5),
    Perturbation("selection +50%", _same, select_scale=1.5),
)
