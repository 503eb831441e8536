"""A study's finished runs -> the end-to-end model's methods (experiments/studies/endtoend/model.py).

Runs are grouped by method (the sparsifier config's name). A method's statistics are fitted over
all its hosted W (extrapolate.py), at each W the mean over its runs there (one per seed); its
compute time is a run's at its smallest hosted W; the ledger template is a run at its largest
hosted W (the nearest to what is extrapolated). The
dense fp32 all-reduce with overlap has the same aggregate and ledger as `dense`: it is priced
from dense's runs (only the overlap differs).
"""
from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

from experiments.studies.endtoend.extrapolate import Replay, Statistics, fit_statistics
from experiments.studies.endtoend.model import Method
from experiments.studies.endtoend.runs import RunStats, read_run
from experiments.studies.endtoend.studies import StudySpec
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
    """W -> the runs the statistics at W are read from (one per seed), W ascending."""
    runs_at: dict[int, list[RunStats]] = {}
    for run in runs:
        runs_at.setdefault(run.workers, []).append(run)
    return dict(sorted(runs_at.items()))


def methods_of(spec: StudySpec, folder: Path) -> dict[str, Method]:
    """Every method with a finished run in `folder`, modelled (module docstring)."""
    by_method: dict[str, list[RunStats]] = {}
    for path in finished_runs(folder):
        run = read_run(path, spec.settle, spec.until, spec.metric)
        by_method.setdefault(run.method, []).append(run)
    methods = {}
    for name, runs in sorted(by_method.items()):
        runs_at = runs_by_workers(runs)
        hosted = sorted(runs_at)
        method = Method(name, runs_at[hosted[0]][0], runs_at[hosted[-1]][0], statistics_of(runs_at, hosted),
                        runs[0].overlap)
        methods[name] = method
        if name in OVERLAPPED_TWIN and OVERLAPPED_TWIN[name] not in by_method:
            methods[OVERLAPPED_TWIN[name]] = replace(method, name=OVERLAPPED_TWIN[name], overlap=True)
    return methods
