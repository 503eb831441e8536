"""The battery's part "does it pay?": a method's per-step speedup over the best dense baseline, and so
its break-even, on `make endtoend`'s default H200 clusters at W = 4 to 1,024, by that study's own
model (experiments/studies/endtoend: model.py, breakeven.py; docs/endtoend.md).

Runs, into `<out>/<study>/` (the end-to-end study's folder layout, so its model reads them as its
own): the method's statistics sweep of the ResNet-18 study (studies.py's `statistics_<method>`:
5 steps at the battery's hosted W, 2 to 16 (battery.PER_STEP), from a calibrated start where the
method has one), and once for every method the study's dense baselines at W = 2 (`base`). Both
are cached by configuration as every sweep of the battery is. A worker count the method refuses is left out, said as not
applicable.

Modelled: every method the folder holds at every W on every default cluster (model_study), each
cell's speedup and its range over the eight moves. The study's step (STEP) and each method's
counted select (COUNTS) are kept beside the runs, so a later call prices the folder again counting
only a method it has not counted (19 methods x 3 W were 2.5 minutes of every call). The generic verdict "pays somewhere"
(analysis/claims/pays.py) reads them.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from analysis.claims.pays import PerStep
from experiments.engine.core.network import NetworkModel
from experiments.studies.endtoend.__main__ import NETWORKS, WORKERS, measure, model_study
from experiments.studies.endtoend.assemble import methods_of
from experiments.studies.endtoend.compute import ComputeProfile, StepWork
from experiments.studies.endtoend.model import DENSE_BASELINES
from experiments.studies.endtoend.studies import QUICKSTART, RESNET18, StudySpec
from experiments.studies.reproduce.studies import Sweep
from sparsifiers import registry



@dataclass(frozen=True)
class PerStepScale:
    """Which end-to-end study prices the step, at which hosted W, with what else on every run."""

    study: StudySpec = RESNET18
    workers: tuple[int, ...] = (2, 4, 8, 16, 32)  # studies.py's hosted grid
    extra: tuple[str, ...] = ()
    quick: bool = False  # the study's cut-down measurement of its model (model_study)
    baselines: str | None = None  # the dense baselines run, when not all of the study's
    profile: str = "h200"  # the compute profile: make endtoend's default, the one GPU measured


STEP = "step.json"  # the study's step, measured once (measured_step)
COUNTS = "select_counts.json"  # each method's counted select on the modelled GPU's path, counted once


# The test suite's: the quickstart study's cut-down runs (the bundled digits, 14 steps) at W = 2,
# one seed, dense alone as the baseline: one run per method, the fewest the model prices. Its
# compute and selection are the runs' own (`measured`): a number the test computes again from them.
QUICK_PER_STEP = PerStepScale(QUICKSTART, (2,), (*QUICKSTART.quick_base, "seed=0"), quick=True, baselines="dense",
                              profile="measured")


def statistics_sweep(method: str, scale: PerStepScale, workers: tuple[int, ...], overrides: tuple[str, ...]) -> Sweep:
    return scale.study.statistics_sweep(method, (f"workers={','.join(map(str, workers))}", *scale.extra, *overrides))


def base_sweep(scale: PerStepScale, overrides: tuple[str, ...]) -> Sweep:
    base = scale.study.base_sweep(scale.quick)
    chosen = f"sparsifier={scale.baselines or scale.study.methods}"
    args = tuple(chosen if arg.startswith("sparsifier=") else arg for arg in base.args)
    return Sweep(base.name, base.folder, (*args, *overrides), base.serves)


def per_step_sweep(method: str, scale: PerStepScale, overrides: tuple[str, ...], refusal) -> tuple[Sweep | None, dict[str, str]]:
    """The method's statistics sweep at the study's hosted W it accepts (`refusal(args)`: run.py's
    reason or None), or None (a dense baseline, priced from the base sweep; or no W accepted), and
    the refused W, by part. The dense baselines' sweep (base_sweep) runs once beside them."""
    if not registry.method(method).selects:
        return None, {}
    accepted, refused = [], {}
    for workers in scale.workers:
        why = refusal(list(statistics_sweep(method, scale, (workers,), overrides).args))
        if why is None:
            accepted.append(workers)
        else:
            refused[f"per-step factor at W={workers}"] = why
    return (statistics_sweep(method, scale, tuple(accepted), overrides) if accepted else None), refused


def measured_step(folder: Path, scale: PerStepScale, overrides: tuple[str, ...]) -> tuple[StepWork, float]:
    """The study's step as make endtoend measures it (counted and timed here), measured once and
    kept in `folder` (STEP): every later pricing of the folder's runs, a test's included, reads the
    same timed backward, so the same runs give the same cells."""
    path = folder / STEP
    if path.is_file():
        saved = json.loads(path.read_text())
        fields = {key: tuple(value) if isinstance(value, list) else value for key, value in saved["work"].items()}
        return StepWork(**fields), saved["density"]
    work, density = measure(scale.study, scale.quick, overrides)
    path.write_text(json.dumps({"work": dataclasses.asdict(work), "density": density}, indent=1) + "\n")
    return work, density


def per_step(out: Path, scale: PerStepScale, overrides: tuple[str, ...] = ()) -> PerStep:
    """Every method's cells (network, W, speedup and its range) from the runs in `<out>/<study>`
    (`overrides`: the battery's, which its runs had), or the reason there are none."""
    spec, folder = scale.study, out / scale.study.name
    where = f"{spec.name} statistics runs in {folder}"
    methods = methods_of(spec, folder) if folder.is_dir() else {}
    if not any(name in DENSE_BASELINES for name in methods):
        return PerStep(spec.name, NETWORKS, {}, f"no finished dense baseline among the {where}")
    networks = [NetworkModel.preset(name) for name in NETWORKS]
    grid = model_study(spec, folder, networks, ComputeProfile.load(scale.profile), list(WORKERS), scale.quick,
                       extra=overrides, step=measured_step(folder, scale, overrides), counts=folder / COUNTS)["grid"]
    cells: dict[str, list[dict]] = {}
    for network, by_workers in grid.items():
        for workers, found in by_workers.items():
            for cell in found:
                cells.setdefault(cell.method, []).append(
                    {"network": network, "workers": workers, "speedup": cell.speedup, "low": cell.low, "high": cell.high})
    return PerStep(spec.name, NETWORKS, cells, f"no finished {where}")
