"""Fitting the network model's link (alpha, beta) to measured collective times.

The model prices a collective on one link as a linear function of alpha and 1/beta:
    t = alpha * A + (1 / beta) * B,
where A (messages on the critical path) and B (bytes on it) come from the model's own formula for
that collective, algorithm and W (collective_costs.py), read off by evaluating the model at two
unit links: A = t(alpha = 1 s, beta = infinite), B = t(alpha = 0, beta = 1 B/s). So the fit is on
the very formulas the model uses, never a second copy of them.

Least squares on RELATIVE residuals, (alpha A + B / beta - t) / t: a 64 MB point (~100 ms) would
otherwise outweigh every small one and alpha would be left to chance. Only points of `min_bytes`
and more are fitted (below, a host's timings are scheduling noise, not a link). Both parameters
are kept >= 0: when the unconstrained optimum has one negative, that one is 0 and the other is
refitted alone (the best non-negative fit, since the problem has two unknowns).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from experiments.studies.calibrate.measure import Sample
from experiments.engine.core.network import NetworkModel

# A model of a link with the given alpha (s) and beta (B/s): the cluster whose link is fitted.
ModelOf = Callable[[float, float], NetworkModel]
BIG = 1e30  # "infinite" bandwidth, in B/s: n / BIG vanishes beside one second


def model_time(model: NetworkModel, op: str, world_size: int, nbytes: float) -> float:
    """The model's time for a measured sample (all_gather's size is its output: n / W per rank)."""
    if op == "all_reduce":
        return model.all_reduce_s(world_size, nbytes)
    if op == "all_gather":
        return model.all_gather_s(world_size, nbytes / world_size)
    if op == "broadcast":
        return model.broadcast_s(world_size, nbytes)
    raise ValueError(f"unknown collective {op!r}")


def coefficients(model_of: ModelOf, op: str, world_size: int, nbytes: float) -> tuple[float, float]:
    """(A, B) of t = alpha A + B / beta, from the model's formula."""
    a = model_time(model_of(1.0, BIG), op, world_size, nbytes)
    b = model_time(model_of(0.0, 1.0), op, world_size, nbytes)
    return a, b


@dataclass(frozen=True)
class Fit:
    alpha_s: float
    bytes_per_s: float  # BIG when the fit found no bandwidth term (a preset needs a finite number)

    @property
    def latency_us(self) -> float:
        return self.alpha_s * 1e6

    @property
    def bandwidth_gbit(self) -> float:
        return self.bytes_per_s * 8 / 1e9


def fit_link(samples: Sequence[Sample], model_of: ModelOf, min_bytes: int = 0) -> Fit:
    """(alpha, beta) minimising the squared relative error of the model over `samples`."""
    rows = [(coefficients(model_of, s.op, s.world_size, s.nbytes), s.seconds) for s in samples if s.nbytes >= min_bytes]
    if len(rows) < 2:
        raise ValueError(f"need at least 2 samples of {min_bytes} bytes or more to fit a link, got {len(rows)}")
    design = np.array([[a / t, b / t] for (a, b), t in rows])
    target = np.ones(len(rows))
    (alpha, inverse_beta), *_ = np.linalg.lstsq(design, target, rcond=None)
    if alpha < 0 or inverse_beta < 0:  # one bound active: the other parameter alone
        candidates = []
        for column in (0, 1):
            x = design[:, column]
            value = max(0.0, float(x @ target / (x @ x)))
            params = [0.0, 0.0]
            params[column] = value
            candidates.append((float(np.sum((design @ np.array(params) - target) ** 2)), params))
        alpha, inverse_beta = min(candidates)[1]
    return Fit(float(alpha), min(BIG, 1.0 / inverse_beta) if inverse_beta > 0 else BIG)


def relative_errors(samples: Sequence[Sample], model: NetworkModel) -> list[float]:
    """|model - measured| / measured per sample."""
    return [abs(model_time(model, s.op, s.world_size, s.nbytes) - s.seconds) / s.seconds for s in samples]


def median_error(samples: Sequence[Sample], model: NetworkModel, min_bytes: int) -> float:
    errors = relative_errors([s for s in samples if s.nbytes >= min_bytes], model)
    return statistics.median(errors) if errors else float("nan")
