"""The standard battery: the same runs for every method, so that every method is measured under
the same conditions (docs/compare.md).

Per method, four parts, each cached by configuration in the study's folder:
- statistics: `experiment=laptop/statistics` for the method alone (600 steps of the laptop
  workload at W = 2, 4, 8, 16, as `make reproduce` runs the papers' methods): traffic, build-up,
  density error and load balance, read on the settled later half;
- convergence: `experiment=laptop/convergence` (W = 4, 5 epochs) at SEEDS seeds, and dense's
  runs beside them: the final accuracy against dense;
- selection: the selection replay at ResNet-18 size (experiments/studies/reproduce/selection.py),
  W = 2 to 16, on both kernel paths, in a folder of its own per method;
- the per-step factor: the ResNet-18 study's statistics runs of `make endtoend` (5 steps at
  W = 2 to 32) and its dense baselines', priced by its model on the default H200 clusters
  (pays.py): the break-even.

A sweep's runs are reused when they are done (experiments/studies/reproduce/sweeps.py: a job whose
run directory records the same overrides), a selection folder when every run in it is; so a
second call runs only what a new method needs. A worker count the method refuses (its
constructor's ConfigError, as run.py's validation raises it before launch) is left out of the
sweep and recorded as not applicable with that reason.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from experiments.engine.launcher.compose import compose_job
from experiments.engine.launcher.validate import validate
from experiments.runformat.errors import ConfigError
from experiments.studies.compare.pays import QUICK_PER_STEP, PerStepScale, run_per_step
from experiments.studies.reproduce import selection
from experiments.studies.reproduce.__main__ import selection_done
from experiments.studies.reproduce.studies import CONVERGENCE, QUICK_ARGS, STATISTICS, Sweep
from experiments.studies.reproduce.sweeps import run_sweep
from sparsifiers import registry

SEEDS = (0, 1, 2)  # convergence: the generic accuracy verdict averages them (issue 47 asks for >= 3)
STATISTICS_WORKERS = (2, 4, 8, 16)  # conf/experiment/laptop/statistics.yaml's grid, given explicitly so a W can be left out
SELECTION_FOLDER = "selection"
REFERENCES = registry.chosen("dense", "micro")  # accuracy's and balance's references (analysis/claims/generic.py)
# The folders the generic verdicts read (the per-step part's runs are the end-to-end model's: pays.py).
VERDICT_FOLDERS = ("statistics", "convergence", SELECTION_FOLDER)


@dataclass(frozen=True)
class Scale:
    """How large the battery is: the laptop's (LAPTOP) or the test suite's (QUICK)."""

    statistics_workers: tuple[int, ...] = STATISTICS_WORKERS
    statistics_args: tuple[str, ...] = ()
    seeds: tuple[int, ...] = SEEDS
    convergence_args: tuple[str, ...] = ()
    selection: dict = field(default_factory=lambda: dict(selection.FULL))
    per_step: PerStepScale = PerStepScale()
    # The methods every scorecard is placed among, run beside the named ones: None, every
    # registered method (the baseline study, baseline.py); the test suite's, the references only.
    field: tuple[str, ...] | None = None


LAPTOP = Scale()
# The test suite's: the bundled digits, 420 statistics steps (the later half, 21 logged rows from
# step 210, is just settled: analysis.claims.study), one seed of a few convergence steps, the
# selection replay's quick grid, the quickstart study's per-step runs at W = 2 (pays.py); the
# references alone as the field.
QUICK = Scale(statistics_workers=(2, 4), statistics_args=("dataset=digits", "max_steps=420", "epochs=100"),
              seeds=(0,), convergence_args=QUICK_ARGS, selection=dict(selection.QUICK), per_step=QUICK_PER_STEP,
              field=REFERENCES)


def statistics_sweep(method: str, workers: tuple[int, ...], scale: Scale, overrides: tuple[str, ...]) -> Sweep:
    return Sweep(f"statistics, {method}", VERDICT_FOLDERS[0],
                 (STATISTICS, f"sparsifier={method}", f"workers={','.join(map(str, workers))}", *scale.statistics_args, *overrides),
                 "traffic, build-up, density, balance")


def convergence_sweep(method: str, scale: Scale, overrides: tuple[str, ...]) -> Sweep:
    return Sweep(f"convergence, {method}", VERDICT_FOLDERS[1],
                 (CONVERGENCE, f"sparsifier={method}", f"seed={','.join(map(str, scale.seeds))}", *scale.convergence_args, *overrides),
                 "final accuracy against dense")


def refusal(args: list[str]) -> str | None:
    """Why run.py would refuse this job before launch (its validation's ConfigError), or None."""
    try:
        validate(compose_job(args))
    except ConfigError as error:
        return str(error)
    return None


def applicable_workers(method: str, scale: Scale, overrides: tuple[str, ...]) -> tuple[list[int], dict[str, str]]:
    """The statistics sweep's worker counts the method accepts, and for each refused one why."""
    accepted, refused = [], {}
    for workers in scale.statistics_workers:
        why = refusal([*statistics_sweep(method, (workers,), scale, overrides).args])
        if why is None:
            accepted.append(workers)
        else:
            refused[f"statistics at W={workers}"] = why
    return accepted, refused


def selection_settle(method: str) -> dict[str, int]:
    """The replay's settle steps for `method`: the study's own for the papers' threshold methods,
    the longest of them for any other thresholded method (its threshold must settle too)."""
    thresholded = registry.method(method).thresholded
    return {method: selection.SETTLE_STEPS.get(method, max(selection.SETTLE_STEPS.values()) if thresholded
                                               else selection.DEFAULT_SETTLE)}


def run_selection(method: str, out: Path, scale: Scale, overrides: tuple[str, ...], say=print) -> dict[str, str]:
    """The selection replay of `method` into out/selection/<method>, unless it is done there;
    returns the worker counts it refused (not applicable), by part."""
    folder = out / SELECTION_FOLDER / method
    options = {"settle_steps": selection_settle(method), **scale.selection, "methods": (method,)}
    refused, accepted = {}, []
    for workers in options["workers"]:
        args = selection.run_overrides(method, workers, selection.KERNEL_PATHS[0], 1, 1, options.get("model", selection.MODEL),
                                       selection.DATASET, selection.DENSITY, extra=overrides)
        why = refusal(args)
        if why is None:
            accepted.append(workers)
        else:
            refused[f"selection at W={workers}"] = why
    options["workers"] = tuple(accepted)
    if len(accepted) < 2:  # no slope from one W: the verdict says so
        return refused
    if selection_done(folder, options):
        say(f"    selection, {method}: already done, reused")
        return refused
    if folder.exists():  # stopped part-way: the replay runs whole, into an empty folder
        shutil.rmtree(folder)
    say(f"    selection, {method}: the replay at W={accepted}")
    selection.run_selection_study(folder, **options, overrides=overrides, progress=lambda line: say(f"    {line}"))
    return refused


def run_method(method: str, out: Path, scale: Scale, overrides: tuple[str, ...], number: int, total: int) -> dict[str, str]:
    """Every part of the battery for one method (the parts already done reused); returns what was
    not applicable, by part, with the reason."""
    refused: dict[str, str] = {}
    if registry.method(method).selects:  # a dense baseline has no traffic, density or selection to measure
        workers, refused = applicable_workers(method, scale, overrides)
        if workers:
            run_sweep(statistics_sweep(method, tuple(workers), scale, overrides), out, number, total)
        refused.update(run_selection(method, out, scale, overrides))
        refused.update(run_per_step(method, out, scale.per_step, overrides, refusal, number, total))
    run_sweep(convergence_sweep(method, scale, overrides), out, number, total)
    return refused
