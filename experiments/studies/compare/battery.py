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
  W = 2 to 16; make endtoend's own reach 32) and its dense baselines', priced by its model on the default H200 clusters
  (pays.py): the break-even.

Here each method's parts are planned (plan_method), every W checked by run.py's validation first:
a worker count the method refuses (its constructor's ConfigError, raised before launch) is left
out of the sweep and recorded as not applicable with that reason. schedule.py runs the plans: the
untimed sweeps a few at a time, each replay alone. A sweep's runs are reused when they are done
(the study's ledger; experiments/studies/reproduce/sweeps.py: a job whose run directory records
the same overrides), a selection folder when every run in it is; so a second call runs only what
a new method needs.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from experiments.engine.launcher.compose import compose_job
from experiments.engine.launcher.validate import validate
from experiments.runformat.errors import ConfigError
from experiments.studies.compare.pays import QUICK_PER_STEP, PerStepScale, base_sweep, per_step_sweep
from experiments.studies.reproduce import selection
from experiments.studies.reproduce.__main__ import selection_done
from experiments.studies.reproduce.studies import CONVERGENCE, QUICK_ARGS, STATISTICS, Sweep
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
    per_step: PerStepScale = field(default_factory=lambda: PER_STEP)
    # The methods every scorecard is placed among, run beside the named ones: None, every
    # registered method (the baseline study, baseline.py); the test suite's, the references only.
    field: tuple[str, ...] | None = None


# The per-step part's hosted runs at W = 2-16, not make endtoend's 2-32: on 2 cores a ResNet-18
# run at W = 32 is 160 forward/backward passes, 80-90 s beside another sweep, half of the part and
# the largest share of the baseline study's hour; the model fits |U| and k_max over the W run and
# extrapolates beyond (the split methods' from where their coordinates lay, at any W).
PER_STEP = PerStepScale(workers=(2, 4, 8, 16))
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
    """The replay's settle steps for `method`: the study's own for the papers' steered methods, the
    longest of them for any other steered method (its threshold must settle too: registry
    `steered`), the default for the rest (a threshold fixed or found afresh each step has nothing
    to settle: DGC's select, 80-110 ms here, over 400 steps at W = 2-16 would cost 50 minutes)."""
    steered = registry.method(method).steered
    return {method: selection.SETTLE_STEPS.get(method, max(selection.SETTLE_STEPS.values()) if steered
                                               else selection.DEFAULT_SETTLE)}


@dataclass(frozen=True)
class Replay:
    """One method's selection replay into out/selection/<method>: the battery's timed part, run
    alone (schedule.py)."""

    method: str
    folder: Path
    options: dict

    @property
    def part(self) -> str:
        return "selection, steered" if registry.method(self.method).steered else "selection"

    def done(self) -> bool:
        return selection_done(self.folder, self.options)

    def run(self, overrides: tuple[str, ...], say=print) -> None:
        if self.folder.exists():  # stopped part-way: the replay runs whole, into an empty folder
            shutil.rmtree(self.folder)
        say(f"    selection, {self.method}: the replay at W={list(self.options['workers'])}")
        selection.run_selection_study(self.folder, **self.options, overrides=overrides, progress=lambda line: say(f"    {line}"))


@dataclass
class Plan:
    """What the battery runs for one method: its untimed sweeps by part (statistics, per-step,
    convergence), its replay (None: it has no selection, or fewer than two W to time), and the
    parts it refused, each with run.py's reason."""

    method: str
    sweeps: list[tuple[str, Sweep]]
    replay: Replay | None
    refused: dict[str, str]


def replay_of(method: str, out: Path, scale: Scale, overrides: tuple[str, ...]) -> tuple[Replay | None, dict[str, str]]:
    """The method's selection replay at the W it accepts, and the W it refused (not applicable)."""
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
        return None, refused
    return Replay(method, out / SELECTION_FOLDER / method, options), refused


def plan_method(method: str, out: Path, scale: Scale, overrides: tuple[str, ...], per_step_overrides: tuple[str, ...]) -> Plan:
    """Every part of the battery for one method, each W checked by run.py's validation first.
    `per_step_overrides`: the per-step sweeps' own (the threads each hosted ResNet-18 run takes when
    sweeps run side by side, schedule.py)."""
    sweeps: list[tuple[str, Sweep]] = []
    refused: dict[str, str] = {}
    replay = None
    if registry.method(method).selects:  # a dense baseline has no traffic, density or selection to measure
        workers, refused = applicable_workers(method, scale, overrides)
        if workers:
            sweeps.append(("statistics", statistics_sweep(method, tuple(workers), scale, overrides)))
        per_step, refused_per_step = per_step_sweep(method, scale.per_step, (*overrides, *per_step_overrides), refusal)
        if per_step is not None:
            sweeps.append(("per-step", per_step))
        replay, refused_selection = replay_of(method, out, scale, overrides)
        refused.update(refused_selection)
        refused.update(refused_per_step)
    sweeps.append(("convergence", convergence_sweep(method, scale, overrides)))
    return Plan(method, sweeps, replay, refused)


def per_step_baselines(plans: list[Plan], scale: Scale, overrides: tuple[str, ...],
                       per_step_overrides: tuple[str, ...]) -> list[tuple[str, Sweep]]:
    """The dense baselines' per-step sweep, once for every method that prices its step (pays.py)."""
    if not any(part == "per-step" for plan in plans for part, _ in plan.sweeps):
        return []
    return [("per-step baselines", base_sweep(scale.per_step, (*overrides, *per_step_overrides)))]
