"""The per-step factor and the break-even: how much faster a sparsifier's step is than the best
dense baseline's, at a W on a cluster, and so the largest steps ratio at which it still pays.

Whether a sparsifier reaches the target sooner than dense is the product of two factors:

    time(method) / time(dense) = steps ratio x step_ms(method) / step_ms(dense)

The step is modelled (model.py: compute, selection, the priced ledger) and does not depend on
the seed; the steps ratio (steps to the target over the best dense baseline's) is a property of
the training run, measured elsewhere (steps_ratio.py). The method pays exactly when its steps
ratio is below its per-step speedup

    speedup(W) = min over dense baselines of step_ms(W) / step_ms(method, W)

which is therefore its **break-even**. Its range is the speedup under each of the eight moves of
the model's least certain inputs (robustness.py's PERTURBATIONS: alpha x0.5 and x2, beta
efficiency 0.7 and 1, compute -30% and +30%, selection -50% and +50%), each move applied to every
method's step and the best dense baseline chosen again under it; the range is the lowest and the
highest of the nominal and the eight.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from experiments.engine.core.network import NetworkModel
from experiments.studies.endtoend.model import DENSE_BASELINES, Point, Study, runs_on
from experiments.studies.endtoend.robustness import PERTURBATIONS, Perturbation


@dataclass(frozen=True)
class Cell:
    """One sparsifier at one W on one cluster: its per-step speedup (= break-even) and its range."""

    method: str
    network: str
    workers: int
    speedup: float  # best dense step_ms / the method's step_ms, nominal inputs
    low: float  # the lowest over the nominal and the eight moves
    high: float
    baseline: str  # the best dense baseline at the nominal inputs
    baseline_step_ms: float
    step_ms: float
    hosted: bool  # its statistics were measured at this W (not extrapolated)
    moves: dict[str, float]  # move label -> the speedup under it

    @property
    def pays_per_step(self) -> bool:
        return self.speedup > 1.0


def speedups(points: list[Point]) -> tuple[Point, dict[str, float]]:
    """The best dense baseline (the shortest step) and each sparsifier's speedup over it."""
    baseline = min((p for p in points if p.method in DENSE_BASELINES), key=lambda p: p.step_ms)
    return baseline, {p.method: baseline.step_ms / p.step_ms for p in points if p.method not in DENSE_BASELINES}


def points_at(study: Study, network: NetworkModel, workers: int) -> list[Point]:
    """Every method the study models on `network` (runs_on: no bf16 baseline without bf16), at `workers`."""
    return [study.point(m, workers, network) for m in study.methods.values() if runs_on(m.name, network, study.profile)]


def moved(study: Study, network: NetworkModel, move: Perturbation) -> tuple[Study, NetworkModel]:
    """The study and the network with one input at one end of its range (robustness.py)."""
    return replace(study, compute_scale=move.compute_scale, select_scale=move.select_scale), move.network(network)


def cells(study: Study, network: NetworkModel, workers: int) -> list[Cell]:
    """Every sparsifier's cell at `workers` on `network` (module docstring)."""
    points = points_at(study, network, workers)
    baseline, nominal = speedups(points)
    under = {}
    for move in PERTURBATIONS:
        other_study, other_network = moved(study, network, move)
        under[move.label] = speedups(points_at(other_study, other_network, workers))[1]
    result = []
    for point in points:
        if point.method in DENSE_BASELINES:
            continue
        moves = {label: by_method[point.method] for label, by_method in under.items()}
        values = [nominal[point.method], *moves.values()]
        result.append(Cell(point.method, network.name, workers, nominal[point.method], min(values), max(values),
                           baseline.method, baseline.step_ms, point.step_ms, point.hosted, moves))
    return result


def grid(study: Study, networks: list[NetworkModel], workers: list[int]) -> dict[str, dict[int, list[Cell]]]:
    """network -> W -> every sparsifier's cell."""
    return {network.name: {w: cells(study, network, w) for w in workers} for network in networks}
