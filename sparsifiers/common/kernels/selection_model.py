"""The modelled GPU's selection time from what one `select` dispatches (experiments/studies/endtoend/selection.py
counts it): `SelectCost` (ops, bytes, ranked bytes), `SelectionModel` (ms = ops x launch_us +
streamed bytes / bandwidth + ranked bytes / ranking) and its fit to a GPU's measured selection.
It lies beside the kernels because they are planned by it too (classed_plan.py weighs a size
class's operations against its padded bytes with it), and everything above reads it from here:
the end-to-end study's compute profiles (compute.py), make bench MODE=ops."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# The ops that rank their input (a radix select or a sort on a GPU): their bytes are ranked bytes.
RANKING = ("aten.topk", "aten.sort", "aten.kthvalue")
PROFILES = Path(__file__).resolve().parents[3] / "conf" / "compute_profile"


@dataclass(frozen=True)
class SelectCost:
    """What one rank's `select` dispatched: aten ops, the bytes of their tensors, and the bytes
    of the ranking ops among them (RANKING)."""

    ops: int
    bytes: float
    ranked: float = 0.0



@dataclass(frozen=True)
class SelectionModel:
    """ops x launch_us + (bytes - ranked) / bandwidth + ranked / ranking, calibrated on `calibrated_on`."""

    launch_us: float
    bandwidth_gbs: float  # effective: what the streaming ops move per second
    calibrated_on: str
    ranking_gbs: float | None = None  # effective: what the ranking ops get through per second (None: as streaming)

    @classmethod
    def from_node(cls, model: dict[str, Any], gpu: str) -> "SelectionModel":
        """A profile's own calibration (its `selection_model:` mapping)."""
        return cls(float(model["launch_us"]), float(model["bandwidth_gbs"]), str(model.get("calibrated_on", gpu)),
                   float(model["ranking_gbs"]) if model.get("ranking_gbs") else None)

    def ms(self, cost: SelectCost) -> float:
        ranking = self.ranking_gbs or self.bandwidth_gbs
        return (cost.ops * self.launch_us * 1e-3 + (cost.bytes - cost.ranked) / (self.bandwidth_gbs * 1e9) * 1e3
                + cost.ranked / (ranking * 1e9) * 1e3)

    def describe(self) -> str:
        ranking = f" + ranked bytes / {self.ranking_gbs:.4g} GB/s" if self.ranking_gbs else ""
        return (f"ops x {self.launch_us:.3g} us + bytes / {self.bandwidth_gbs:.4g} GB/s{ranking} "
                f"(calibrated on {self.calibrated_on})")

    def on(self, gpu: str, memory_bandwidth_gbs: float | None, calibrated_memory_gbs: float | None) -> "SelectionModel":
        """The same model on another GPU: its throughputs scaled by the memory bandwidths' ratio."""
        if not memory_bandwidth_gbs or not calibrated_memory_gbs:
            return self
        ratio = memory_bandwidth_gbs / calibrated_memory_gbs
        return SelectionModel(self.launch_us, self.bandwidth_gbs * ratio, self.calibrated_on,
                              self.ranking_gbs * ratio if self.ranking_gbs else None)


def fit(costs: list[SelectCost], measured_ms: list[float]) -> tuple[float, float, float | None]:
    """(launch_us, bandwidth GB/s, ranking GB/s or None): non-negative least squares of
    ms = ops a + (bytes - ranked) b + ranked c, each point weighted by 1 / its measured ms: the
    relative error is what matters, and the measured times span a decade (0.08 ms for a threshold
    scan, 0.7 ms for a Gaussian fit), which an unweighted fit would leave to the slowest few."""
    import itertools

    import numpy as np

    y = np.array(measured_ms)
    a = np.array([[c.ops * 1e-3, (c.bytes - c.ranked) * 1e-6, c.ranked * 1e-6] for c in costs]) / y[:, None]
    best: tuple[float, np.ndarray] | None = None
    # Non-negative least squares of three unknowns: the unconstrained fit on every face.
    for size in (3, 2, 1):
        for columns in map(list, itertools.combinations(range(3), size)):
            if 1 not in columns:
                continue  # the streaming bytes always cost something
            x = np.zeros(3)
            x[columns] = np.linalg.lstsq(a[:, columns], np.ones_like(y), rcond=None)[0]
            residual = float(np.sum((a @ x - 1.0) ** 2))
            if (x >= 0).all() and x[1] > 0 and (best is None or residual < best[0]):
                best = (residual, x)
    if best is None:
        raise ValueError("the selection model cannot be fitted: no positive bandwidth explains the measurements")
    launch, inverse_bw, inverse_ranking = best[1]
    return float(launch), 1.0 / float(inverse_bw), (1.0 / float(inverse_ranking) if inverse_ranking > 0 else None)


def calibrated(profile: str) -> SelectionModel:
    """The selection model a compute profile calibrated itself (conf/compute_profile/<profile>.yaml),
    read without the end-to-end study's profile machinery (compute.py), which lies above the kernels."""
    node = yaml.safe_load((PROFILES / f"{profile}.yaml").read_text())
    model = node.get("selection_model")
    if not isinstance(model, dict):
        raise ValueError(f"compute_profile {profile} holds no calibration of its own (selection_model: {model!r})")
    return SelectionModel.from_node(model, node["gpu"])

