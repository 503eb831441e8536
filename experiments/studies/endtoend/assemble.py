"""A study's finished runs -> the end-to-end model's methods (experiments/studies/endtoend/model.py).

Runs are grouped by method (the sparsifier config's name). A method's accuracy runs are its runs
at the study's accuracy W that evaluated along the way, one per seed: each gives its steps to the
target, and their mean and interval are the method's (uncertainty.py); its statistics are fitted over all its hosted W (extrapolate.py), at each
W from its statistics runs (one per seed) where it has any, else from the accuracy run; the
ledger template is a run at its largest hosted W (the nearest to what is extrapolated). The
dense fp32 all-reduce with overlap has the same aggregate and ledger as `dense`: it is priced
from dense's runs (only the overlap differs).
"""
from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

from experiments.studies.endtoend.extrapolate import Replay, Statistics, fit_statistics
from experiments.studies.endtoend.model import Method
from experiments.studies.endtoend.runs import RunStats, read_run, steps_to_target
from experiments.studies.endtoend.studies import StudySpec
from experiments.studies.endtoend.uncertainty import Steps
from experiments.runformat.run_dir import STATUS, SUMMARY, read_json
from sparsifiers.registry import METHODS

# method -> its overlapped twin: same runs (the twin's step is the method's, bit for bit), overlapped in the model
OVERLAPPED_TWIN = {entry.same_step_as: entry.name for entry in METHODS if entry.same_step_as and entry.overlap}


def finished_runs(folder: Path) -> list[Path]:
    """Run directories under `folder` that finished (status.json says done, summary.json exists)."""
    runs = []
    for status in sorted(folder.rglob(STATUS)):
        state = read_json(status) or {}
        if state.get("status") == "done" and (status.parent / SUMMARY).is_file():
            runs.append(status.parent)
    return runs


def statistics_of(runs_at: dict[int, list[RunStats]], workers: list[int]) -> Statistics:
    """One method's statistics fitted on its runs at `workers` (experiments/studies/endtoend/extrapolate.py):
    at each W the mean over its runs there (the seeds), every run's replay anchored at its own."""
    first = runs_at[workers[0]][0]

    def mean(statistic: str) -> list[float]:
        return [statistics.fmean(getattr(run, statistic) for run in runs_at[w]) for w in workers]

    return fit_statistics(workers, mean("union"), mean("k_max"), mean("select_ms"), first.numel, first.scope == "split",
                          plans=[runs_at[w][0].plan for w in workers] if first.plan is not None else None,
                          replays=[Replay(run.workers, run.structure, {"k_max": run.k_max, "union": run.union})
                                   for w in workers for run in runs_at[w] if run.structure is not None])


def runs_by_workers(runs: list[RunStats]) -> dict[int, list[RunStats]]:
    """W -> the runs the statistics at W are read from: the statistics runs (one per seed) where
    there are any, else the accuracy run (evaluated along the way, the same window read)."""
    runs_at: dict[int, list[RunStats]] = {}
    for run in runs:
        runs_at.setdefault(run.workers, []).append(run)
    return {w: [r for r in here if not r.evaluated_along] or here for w, here in sorted(runs_at.items())}


def methods_of(spec: StudySpec, folder: Path, target: float, accuracy_workers: int | None = None,
               higher_is_better: bool = True) -> dict[str, Method]:
    """Every method with an accuracy run in `folder`, modelled (module docstring)."""
    by_method: dict[str, list[RunStats]] = {}
    for path in finished_runs(folder):
        run = read_run(path, spec.settle, spec.until, spec.metric)
        by_method.setdefault(run.method, []).append(run)
    workers_for_accuracy = accuracy_workers or spec.accuracy_workers
    methods = {}
    for name, runs in sorted(by_method.items()):
        accuracy = sorted((r for r in runs if r.workers == workers_for_accuracy and r.evaluated_along),
                          key=lambda r: r.seed)
        if not accuracy:
            continue  # statistics without an accuracy run: nothing to time to the target
        short = [r for r in accuracy if r.stopped_at_target is not None
                 and steps_to_target(r.curve, target, higher_is_better) is None]
        if short:
            raise SystemExit(f"{short[0].path} stopped at its eval_target before reaching {target:g}: "
                             "model it at that target, or run the study again at this one")
        runs_at = runs_by_workers(runs)
        hosted = sorted(runs_at)
        steps = Steps(tuple(steps_to_target(r.curve, target, higher_is_better) for r in accuracy),
                      tuple(r.curve[-1][0] for r in accuracy), tuple(r.seed for r in accuracy))
        method = Method(name, accuracy[0], runs_at[hosted[-1]][0], statistics_of(runs_at, hosted), steps,
                        accuracy[0].overlap)
        methods[name] = method
        if name in OVERLAPPED_TWIN and OVERLAPPED_TWIN[name] not in by_method:
            methods[OVERLAPPED_TWIN[name]] = replace(method, name=OVERLAPPED_TWIN[name], overlap=True)
    return methods

