"""Selection time on a modelled GPU: measured there where a profile has a measurement for the
method, W and layout size, else modelled from what one selection dispatches.

    measured:  the profile's `selection_ms.<method>.<W>` (a GPU benchmark's medians at the
               layout `selection_at.numel`), for a study whose N is within 1% of that layout;
               between measured W linear in log W, beyond them held at the nearest
    modelled:  select_ms = ops x launch_us + (bytes - ranked) / bandwidth + ranked / ranking

ops and bytes are counted here, on the CPU, at the study's layout and density, on the path a GPU
takes (the kernels' torch path, the selections' batched paths): every aten op one rank's
`select` dispatches (a kernel launch there; `.item()` and the like a host sync too), the bytes
its tensor arguments and results hold (read or written once each), and among them the `ranked`
bytes of the ranking ops (topk, sort, kthvalue: a radix select on a GPU, several passes over its
input, about three times slower per byte than a streaming kernel on the H200), after the method
has settled for a few steps on gradient-like data (experiments/studies/benchmarks/select.py's).
launch_us and the two throughputs are fitted on the measured GPU (`selection_model` in its
profile: least squares, relative to each measurement, over the methods whose select is the code
it measured, `python -m experiments.studies.endtoend.selection`); another GPU takes the same launch cost
(the host's eager dispatch) and the throughputs times its memory bandwidth over the measured GPU's.
"""
from __future__ import annotations

import bisect
import copy
import dataclasses
import hashlib
import inspect
import json
import math
from pathlib import Path

import torch

from experiments.engine.core.sync_count import SyncCounter
from experiments.runformat.run_dir import write_atomic
from sparsifiers.common.kernels.selection_model import RANKING, SelectCost, SelectionModel, fit
from sparsifiers import registry

SETTLE_STEPS = 8  # as the selection benchmark: adaptive thresholds settle before the count
SAME_LAYOUT = 0.01  # a measurement applies to a study whose N is within 1% of the measured N


# The ops that rank their input (a radix select or sort on a GPU) rather than stream it.


def count_select(sparsifier, acc: torch.Tensor, workers: int, settle: int = SETTLE_STEPS) -> SelectCost:
    """Counts rank 0's `select` (as a follower where the method has a leader) after `settle`
    steps, feedback as if every rank selected as many as rank 0 (the selection benchmark's), on
    the path a GPU takes: the kernels' torch path (the compiled kernels are CPU-only) and the
    selections' batched paths (`simulated_gpu`: on CPU tensors DEFT and Accordion would take their
    per-unit loops, which dispatch many more, smaller operations than a GPU runs)."""
    from sparsifiers.common.capabilities import leader_of
    from sparsifiers.common.exchange_kinds import Feedback
    from sparsifiers.common.kernels.backend import current_backend, set_backend, simulated_gpu

    previous = current_backend()
    set_backend("torch")
    try:
        with simulated_gpu():
            step = 0
            for step in range(settle):
                sparsifier.precondition(acc)  # the step's own hook before any plan (Accordion's norms)
                plan = sparsifier.make_plan(acc, step) if leader_of(sparsifier, step) is not None else None
                chosen = sparsifier.select(acc, step, plan)
                count = acc.numel() if chosen is None else int(chosen.numel())
                sparsifier.observe(Feedback(step, torch.full((workers,), count, dtype=torch.int64),
                                            min(acc.numel(), count * workers)))
            step = settle
            while workers > 1 and leader_of(sparsifier, step) == 0:
                step += 1
            sparsifier.precondition(acc)
            leader = leader_of(sparsifier, step)
            # The leader's plan made on a copy: a follower's select computes what the plan did (DEFT's
            # unit norms) and must not find it cached on itself.
            planner = copy.deepcopy(sparsifier) if leader not in (None, 0) else sparsifier
            plan = planner.make_plan(acc, step) if leader is not None else None
            # The steady state: the rank met this select's layout before (DEFT's bin recurs every W
            # steps), so what is cached per layout (kernels/classed_plan.py) is cached.
            copy.deepcopy(sparsifier).select(acc, step, plan)
            with SyncCounter(count_bytes=True) as counter:
                sparsifier.select(acc, step, plan)
    finally:
        set_backend(previous)
    return SelectCost(counter.ops, float(counter.bytes), float(sum(counter.bytes_by_op[op] for op in RANKING)))


def count_method(overrides: list[str], layout, density: float, workers: int) -> SelectCost:
    """`count_select` of the sparsifier the config `overrides` compose to, at `workers`."""
    from experiments.engine.launcher.compose import compose_job
    from experiments.engine.rank.build import build_sparsifier

    cfg = compose_job([*overrides, f"workers={workers}", f"sparsifier.density={density}"])
    acc = at_operating_point(gradient_like(layout.numel), density)
    return count_select(build_sparsifier(cfg, layout, rank=0), acc, workers)


COUNT_WORKERS = (4, 32, 256)  # a study's methods are counted at these W, log-interpolated between
# A twin priced from another method's runs (dense_overlap from dense's) selects as it does.
SAME_CONFIG = {entry.name: entry.same_step_as for entry in registry.METHODS if entry.same_step_as}


def count_for_study(overrides: list[str], methods: list[str], workers: tuple[int, ...] = COUNT_WORKERS,
                    kept: Path | None = None) -> dict[str, dict[int, SelectCost]]:
    """Each method's select, counted at the layout and density of the study whose accuracy runs
    `overrides` compose (its model, data and sparsifier knobs), at `workers`. A W the method
    cannot run at (ExDyna past its block count) is left out of its counts; a method counted at no
    W is an error, as is any other failure: a model that silently fell back would misprice it.
    `kept`: a JSON file of earlier counts (count_key), read and added to, so that a study priced
    again counts only what it has not (make compare prices every method at every call: 19
    methods x 3 W, 2.5 minutes of counting at ResNet-18's layout, for one new method's cells)."""
    from omegaconf import open_dict

    from experiments.engine.launcher.compose import compose_job
    from experiments.engine.rank.build import build_dataset, build_model, build_sparsifier
    from sparsifiers.common.layout import Layout

    base = [o for o in overrides if "," not in o]
    cfg = compose_job(base)
    with open_dict(cfg):
        del cfg["hydra"]
    layout = Layout.from_module(build_model(cfg, build_dataset(cfg)))
    saved = _read_counts(kept)
    operating: dict[float, torch.Tensor] = {}  # one gradient-like input per density, each count given a copy
    costs: dict[str, dict[int, SelectCost]] = {}
    for method in methods:
        per_w, refused = {}, []
        for w in workers:
            job = compose_job([*base, f"sparsifier={SAME_CONFIG.get(method, method)}", f"workers={w}"])
            density = float(job.sparsifier.get("density", 0.01))
            key = count_key(job, layout.numel, w)
            if key in saved:
                per_w[w] = SelectCost(**saved[key])
                continue
            try:
                sparsifier = build_sparsifier(job, layout, rank=0)
            except ValueError as error:  # this W is out of the method's range
                refused.append(f"W = {w}: {error}")
                continue
            if density not in operating:
                operating[density] = at_operating_point(gradient_like(layout.numel), density)
            per_w[w] = count_select(sparsifier, operating[density].clone(), w)
            saved[key] = dataclasses.asdict(per_w[w])
        if not per_w:
            raise ValueError(f"{method}: its selection could not be counted at any W ({'; '.join(refused)})")
        costs[method] = per_w
    if kept is not None:
        write_atomic(kept, json.dumps(saved, indent=1, sort_keys=True) + "\n")
    return costs


def count_key(job, numel: int, workers: int) -> str:
    """What a count depends on: the sparsifier's config as composed, W, the layout's size, and the
    bytes of the file that defines its class (a method edited in place counts again)."""
    from omegaconf import OmegaConf

    from experiments.engine.rank.build import target_of

    source = Path(inspect.getsourcefile(target_of(job.sparsifier)))
    return json.dumps({"sparsifier": OmegaConf.to_container(job.sparsifier, resolve=True), "workers": workers,
                       "numel": numel, "code": hashlib.sha256(source.read_bytes()).hexdigest()[:16]},
                      sort_keys=True, default=str)


def _read_counts(kept: Path | None) -> dict[str, dict]:
    if kept is None or not kept.is_file():
        return {}
    return json.loads(kept.read_text())


def gradient_like(numel: int, seed: int = 0) -> torch.Tensor:
    """Heavy-tailed, like real gradients: Student-t with 3 degrees of freedom (as the selection
    benchmark's, experiments/studies/benchmarks/select.py, which this role may not import)."""
    generator = torch.Generator().manual_seed(seed)
    normal = torch.randn(numel, generator=generator)
    chi = torch.randn(numel, 3, generator=generator).square().sum(1)
    return normal / (chi / 3).sqrt() * 1e-3


def at_operating_point(acc: torch.Tensor, density: float) -> torch.Tensor:
    """acc scaled so that its k-th largest magnitude is the threshold methods' starting lambda:
    they then select about k, as once their thresholds have settled (the benchmark's rule)."""
    from sparsifiers.common.threshold_control import initial_threshold

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


# The methods whose `select` is the code the H200 measured (selection_at.code in its profile): DEFT,
# Accordion, Random-k, Ok-Topk and SIDCo changed since (`superseded` there).
# A choice fixed by that measurement, not a trait of the methods.
CALIBRATION_METHODS = registry.chosen("topk", "micro", "exdyna", "dgc", "threshold", "gaussiank", "sage")
# Of the superseded ones, those whose modelled select is printed beside the fit (not fitted).
SUPERSEDED_SHOWN = registry.chosen("deft", "accordion")
CALIBRATION_WORKERS = (1, 4, 16, 64)


def main() -> None:
    """Counts the calibration's (method, W) at the CIFAR ResNet-18 layout, fits the model to the
    H200's measured selection of those methods (conf/compute_profile/h200.yaml) and prints what
    to paste into its `selection_model`, each point's error, and what the model then says of the
    methods whose select changed since the measurement (`superseded`)."""
    from experiments.studies.endtoend.compute import ComputeProfile
    from experiments.engine.launcher.compose import compose_job
    from experiments.engine.rank.build import build_dataset, build_model
    from sparsifiers.common.layout import Layout

    profile = ComputeProfile.load("h200")
    cfg = compose_job(["workload=resnet18_cifar10", "scale=smoke"])
    layout = Layout.from_module(build_model(cfg, build_dataset(cfg)))  # CIFAR ResNet-18: N = 11,173,962
    assert layout.numel == int(profile.selection_at["numel"]), layout.numel
    density = float(profile.selection_at["density"])
    superseded = list((profile.selection_at.get("superseded") or {}))
    rows = []
    for method in (*CALIBRATION_METHODS, *(m for m in SUPERSEDED_SHOWN if m in superseded)):
        for workers in CALIBRATION_WORKERS:
            cost = count_method([f"sparsifier={method}", "dataset=synthetic", "model=mlp"], layout, density, workers)
            rows.append((method, workers, cost))
            print(f"  {method} W={workers}: {cost.ops} ops, {cost.bytes:.4g} bytes, {cost.ranked:.4g} ranked", flush=True)
    fitted = [(m, w, c) for m, w, c in rows if m in CALIBRATION_METHODS]
    launch, bandwidth, ranking = fit([c for _, _, c in fitted], [profile.selection_ms[m][w] for m, w, _ in fitted])
    print(f"selection_model: {{launch_us: {launch:.3g}, bandwidth_gbs: {bandwidth:.4g}, "
          f"ranking_gbs: {ranking if ranking is None else f'{ranking:.4g}'}, calibrated_on: {profile.gpu}}}")
    model = SelectionModel(launch, bandwidth, profile.gpu, ranking)
    for method, workers, cost in rows:
        measured = profile.selection_ms.get(method, {}).get(workers)
        note = "" if method in CALIBRATION_METHODS else f" (not fitted: its select changed since {profile.selection_at.get('code')})"
        error = f", {(model.ms(cost) - measured) / measured:+.0%}" if measured else ""
        print(f"{method} W={workers}: measured {measured if measured is None else f'{measured:.3g}'} ms, "
              f"modelled {model.ms(cost):.3g} ms{error}{note}")


if __name__ == "__main__":
    main()
