"""Selection time on a modelled GPU: measured there where a profile has a measurement for the
method, W and layout size, else modelled from what one selection dispatches.

    measured:  the profile's `selection_ms.<method>.<W>` (a GPU benchmark's medians at the
               layout `selection_at.numel`), for a study whose N is within 1% of that layout;
               between measured W linear in log W, beyond them held at the nearest
    modelled:  select_ms = ops x launch_us + bytes / bandwidth

ops and bytes are counted here, on the CPU, at the study's layout and density: every aten op one
rank's `select` dispatches on the torch path of the selection kernels, the one a GPU runs (a kernel launch there; `.item()` and the like a host sync too) and
the bytes its tensor arguments and results hold (read or written once each), after the method
has settled for a few steps on gradient-like data (experiments/benchmarks/select.py's). launch_us
and the bandwidth are fitted on the measured GPU (`selection_model` in its profile: least squares
of its measured selection over the ops and bytes counted at the measurement's layout,
`python -m experiments.endtoend.selection`); another GPU takes the same launch cost (the host's
eager dispatch, which is what bounds these selections) and that fitted bandwidth times its own
memory bandwidth over the measured GPU's.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

SETTLE_STEPS = 8  # as the selection benchmark: adaptive thresholds settle before the count
SAME_LAYOUT = 0.01  # a measurement applies to a study whose N is within 1% of the measured N


@dataclass(frozen=True)
class SelectCost:
    """What one rank's `select` dispatched: aten ops and the bytes of their tensors."""

    ops: int
    bytes: float


class _CountOpsAndBytes(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        leaves = tree_flatten((args, kwargs or {}, out))[0]
        self.bytes += sum(t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor))
        return out


def count_select(sparsifier, acc: torch.Tensor, workers: int, settle: int = SETTLE_STEPS) -> SelectCost:
    """Counts rank 0's `select` (as a follower where the method has a leader) after `settle`
    steps, feedback as if every rank selected as many as rank 0 (the selection benchmark's)."""
    from sparsifiers.base import Feedback
    from sparsifiers.kernels.backend import current_backend, set_backend

    previous = current_backend()
    set_backend("torch")  # the path a GPU takes: the compiled kernels are CPU-only, and no aten op
    try:
        return _count_select(sparsifier, acc, workers, settle, Feedback)
    finally:
        set_backend(previous)


def _count_select(sparsifier, acc: torch.Tensor, workers: int, settle: int, Feedback) -> SelectCost:
    step = 0
    for step in range(settle):
        plan = sparsifier.make_plan(acc, step) if sparsifier.plan_leader(step) is not None else None
        chosen = sparsifier.select(acc, step, plan)
        count = acc.numel() if chosen is None else int(chosen.numel())
        sparsifier.observe(Feedback(step, torch.full((workers,), count, dtype=torch.int64), min(acc.numel(), count * workers)))
    step = settle
    while workers > 1 and sparsifier.plan_leader(step) == 0:
        step += 1
    plan = sparsifier.make_plan(acc, step) if sparsifier.plan_leader(step) is not None else None
    with _CountOpsAndBytes() as counter:
        sparsifier.select(acc, step, plan)
    return SelectCost(counter.ops, float(counter.bytes))


def count_method(overrides: list[str], layout, density: float, workers: int) -> SelectCost:
    """`count_select` of the sparsifier the config `overrides` compose to, at `workers`."""
    from experiments.launcher.compose import compose_job
    from experiments.rank.build import build_sparsifier

    cfg = compose_job([*overrides, f"workers={workers}", f"sparsifier.density={density}"])
    acc = at_operating_point(gradient_like(layout.numel), density)
    return count_select(build_sparsifier(cfg, layout, rank=0), acc, workers)


COUNT_WORKERS = (4, 32, 256)  # a study's methods are counted at these W, log-interpolated between
SAME_CONFIG = {"dense_overlap": "dense"}  # a twin priced from another method's runs selects as it does


def count_for_study(overrides: list[str], methods: list[str], workers: tuple[int, ...] = COUNT_WORKERS) -> dict[str, dict[int, SelectCost]]:
    """Each method's select, counted at the layout and density of the study whose accuracy runs
    `overrides` compose (its model, data and sparsifier knobs), at `workers`. A method whose
    config does not compose is left out (the model then says it scaled the hosted time)."""
    from omegaconf import open_dict

    from experiments.launcher.compose import compose_job
    from experiments.rank.build import build_dataset, build_model, build_sparsifier
    from sparsifiers.layout import Layout

    base = [o for o in overrides if "," not in o]
    cfg = compose_job(base)
    with open_dict(cfg):
        del cfg["hydra"]
    layout = Layout.from_module(build_model(cfg, build_dataset(cfg)))
    costs: dict[str, dict[int, SelectCost]] = {}
    for method in methods:
        per_w = {}
        try:
            for w in workers:
                job = compose_job([*base, f"sparsifier={SAME_CONFIG.get(method, method)}", f"workers={w}"])
                density = float(job.sparsifier.get("density", 0.01))
                acc = at_operating_point(gradient_like(layout.numel), density)
                per_w[w] = count_select(build_sparsifier(job, layout, rank=0), acc, w)
        except Exception:  # noqa: BLE001 - a method that cannot be built here is not counted
            continue
        costs[method] = per_w
    return costs


def gradient_like(numel: int, seed: int = 0) -> torch.Tensor:
    """Heavy-tailed, like real gradients: Student-t with 3 degrees of freedom (as the selection
    benchmark's, experiments/benchmarks/select.py, which this role may not import)."""
    generator = torch.Generator().manual_seed(seed)
    normal = torch.randn(numel, generator=generator)
    chi = torch.randn(numel, 3, generator=generator).square().sum(1)
    return normal / (chi / 3).sqrt() * 1e-3


def at_operating_point(acc: torch.Tensor, density: float) -> torch.Tensor:
    """acc scaled so that its k-th largest magnitude is the threshold methods' starting lambda:
    they then select about k, as once their thresholds have settled (the benchmark's rule)."""
    from sparsifiers.threshold_control import initial_threshold

    k = max(1, int(density * acc.numel()))
    kth = float(torch.topk(acc.abs(), k, sorted=False).values.min())
    return acc.mul_(initial_threshold(k) / kth)


def log_interpolate(points: dict[int, float], workers: int) -> float:
    """Linear in log W between the nearest W of `points`, held at the ends."""
    ws = sorted(points)
    if workers <= ws[0]:
        return points[ws[0]]
    if workers >= ws[-1]:
        return points[ws[-1]]
    i = bisect.bisect_left(ws, workers)
    if ws[i] == workers:
        return points[workers]
    lo, hi = ws[i - 1], ws[i]
    t = (math.log(workers) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return points[lo] + t * (points[hi] - points[lo])


@dataclass(frozen=True)
class SelectionModel:
    """ops x launch_us + bytes / bandwidth, calibrated on `calibrated_on`."""

    launch_us: float
    bandwidth_gbs: float  # effective: what the calibration's bytes term moves per second
    calibrated_on: str

    def ms(self, cost: SelectCost) -> float:
        return cost.ops * self.launch_us * 1e-3 + cost.bytes / (self.bandwidth_gbs * 1e9) * 1e3

    def on(self, gpu: str, memory_bandwidth_gbs: float | None, calibrated_memory_gbs: float | None) -> "SelectionModel":
        """The same model on another GPU: its bandwidth scaled by the memory bandwidths' ratio."""
        if not memory_bandwidth_gbs or not calibrated_memory_gbs:
            return self
        return SelectionModel(self.launch_us, self.bandwidth_gbs * memory_bandwidth_gbs / calibrated_memory_gbs,
                              self.calibrated_on)


def fit(costs: list[SelectCost], measured_ms: list[float]) -> tuple[float, float]:
    """(launch_us, bandwidth GB/s): least squares of ms = ops a + bytes b with a, b >= 0."""
    import numpy as np

    a = np.array([[c.ops * 1e-3, c.bytes * 1e-9 * 1e3] for c in costs])  # ms per us of launch, ms per (GB/s)^-1
    y = np.array(measured_ms)
    solution, *_ = np.linalg.lstsq(a, y, rcond=None)
    launch, inverse_bw = (float(v) for v in solution)
    if inverse_bw <= 0:  # the bytes explain nothing: launches alone
        launch, inverse_bw = float(np.dot(a[:, 0], y) / np.dot(a[:, 0], a[:, 0])), 1e-9
    return launch, 1.0 / inverse_bw


CALIBRATION_METHODS = ("topk", "deft", "micro", "exdyna")
CALIBRATION_WORKERS = (1, 4, 16, 64)


def main() -> None:
    """Counts the calibration's (method, W) at the CIFAR ResNet-18 layout and fits the model to
    the H200's measured selection (conf/compute_profile/h200.yaml): prints what to paste into
    its `selection_model` and `selection_counts`."""
    from experiments.endtoend.compute import ComputeProfile
    from experiments.launcher.compose import compose_job
    from experiments.rank.build import build_dataset, build_model
    from sparsifiers.layout import Layout

    profile = ComputeProfile.load("h200")
    cfg = compose_job(["workload=resnet18_cifar10", "scale=smoke"])
    layout = Layout.from_module(build_model(cfg, build_dataset(cfg)))  # CIFAR ResNet-18: N = 11,173,962
    assert layout.numel == int(profile.selection_at["numel"]), layout.numel
    density = float(profile.selection_at["density"])
    costs, measured, rows = [], [], []
    for method in CALIBRATION_METHODS:
        for workers in CALIBRATION_WORKERS:
            cost = count_method([f"sparsifier={method}", "dataset=synthetic", "model=mlp"], layout, density, workers)
            costs.append(cost)
            measured.append(profile.selection_ms[method][workers])
            rows.append((method, workers, cost))
            print(f"  {method}: {{{workers}: [{cost.ops}, {cost.bytes:.0f}]}}", flush=True)
    launch, bandwidth = fit(costs, measured)
    print(f"launch_us: {launch:.3g}, bandwidth_gbs: {bandwidth:.4g}")
    model = SelectionModel(launch, bandwidth, "H200")
    for (method, workers, cost), ms in zip(rows, measured):
        print(f"{method} W={workers}: measured {ms:.3g} ms, modelled {model.ms(cost):.3g} ms")


if __name__ == "__main__":
    main()
