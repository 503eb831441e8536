"""Whether a pick survives the model's least certain inputs.

Each pick ("what would I pick": the method fastest to the target at one W on one network) is
modelled again with one input moved to each end of its stated range, the others as they were:

    alpha (every link's latency)     x0.5 and x2        nominal latencies, not measured ones
    beta efficiency (every link)     0.7 and 1          nccl-tests reach 70-96% of line rate
    compute                          -30% and +30%      a profile's FLOP fallback is far off
    selection                        -50% and +50%      one GPU measured, others modelled

The pick, there and at each end, is the pick table's (model.pick): the fastest method when its
interval of time to the target separates from every other's, else a tie within noise. The cell
reads "robust" when the same method is picked at all eight ends, else "depends on" the inputs
that change it, each with what is picked there ("compute +30%: dense_bf16", "selection +50%: tie
(within noise)"); a tie at the nominal inputs has no pick to move: its cell is the tie.
One input at a time: the ranges are independent guesses, and their corners would compound them.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from experiments.engine.core.network import NetworkModel
from experiments.studies.endtoend.model import Point, Study, pick, runs_on
from experiments.studies.endtoend.uncertainty import TIE


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


def verdict(pick: str | None, winners: dict[str, str | None]) -> str:
    """"robust", or "depends on <label>: <winner>; ..." for the perturbations whose winner differs."""
    changed = [f"{label}: {winner or 'none reaches'}" for label, winner in winners.items() if winner != pick]
    return "depends on " + "; ".join(changed) if changed else "robust"


def robustness(study: Study, networks: list[NetworkModel], workers: list[int]) -> dict[str, dict[str, str]]:
    """network -> str(W) -> the pick's verdict (string keys: the JSON's, so the page renders alike)."""
    result: dict[str, dict[str, str]] = {}
    for network in networks:
        methods = [m for m in study.methods.values() if runs_on(m.name, network, study.profile)]
        picks = {w: _winner([study.point(m, w, network) for m in methods]) for w in workers}
        winners: dict[int, dict[str, str | None]] = {w: {} for w in workers}
        for perturbation in PERTURBATIONS:
            moved = replace(study, compute_scale=perturbation.compute_scale, select_scale=perturbation.select_scale)
            net = perturbation.network(network)
            for w in workers:
                winners[w][perturbation.label] = _winner([moved.point(m, w, net) for m in methods])
        result[network.name] = {str(w): TIE if picks[w] == TIE else verdict(picks[w], winners[w]) for w in workers}
    return result


def _winner(points: list[Point]) -> str | None:
    """The method picked, TIE, or None when none reaches the target."""
    fastest, tied = pick(points)
    return None if fastest is None else TIE if tied else fastest.method
