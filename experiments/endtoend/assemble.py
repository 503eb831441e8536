"""A study's finished runs -> the end-to-end model's methods (experiments/endtoend/model.py).

Runs are grouped by method (the sparsifier config's name). A method's accuracy run is its run at
the study's accuracy W; its statistics are fitted over all its hosted W (extrapolate.py); the
ledger template is the run at its largest hosted W (the nearest to what is extrapolated). The
dense fp32 all-reduce with overlap has the same aggregate and ledger as `dense`: it is priced
from dense's runs (only the overlap differs).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from experiments.endtoend.extrapolate import Statistics, fit_statistics
from experiments.endtoend.model import Method
from experiments.endtoend.runs import RunStats, read_run, steps_to_target
from experiments.endtoend.studies import StudySpec
from experiments.run_dir import STATUS, SUMMARY, read_json

OVERLAPPED_TWIN = {"dense": "dense_overlap"}  # same runs, overlapped in the model


def finished_runs(folder: Path) -> list[Path]:
    """Run directories under `folder` that finished (status.json says done, summary.json exists)."""
    runs = []
    for status in sorted(folder.rglob(STATUS)):
        state = read_json(status) or {}
        if state.get("status") == "done" and (status.parent / SUMMARY).is_file():
            runs.append(status.parent)
    return runs


def statistics_of(by_workers: dict[int, RunStats], workers: list[int]) -> Statistics:
    """One method's statistics fitted on its runs at `workers` (experiments/endtoend/extrapolate.py)."""
    runs = [by_workers[w] for w in workers]
    first = runs[0]
    return fit_statistics(workers, [r.union for r in runs], [r.k_max for r in runs], [r.select_ms for r in runs],
                          first.numel, first.scope == "split",
                          plans=[r.plan for r in runs] if first.plan is not None else None,
                          structures={r.workers: r.structure for r in runs})


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
        accuracy = [r for r in runs if r.workers == workers_for_accuracy and len(r.curve) > 1]
        if not accuracy:
            continue  # statistics without an accuracy run: nothing to time to the target
        by_workers = {r.workers: r for r in sorted(runs, key=lambda r: len(r.curve))}  # the accuracy run wins its W
        hosted = sorted(by_workers)
        statistics = statistics_of(by_workers, hosted)
        method = Method(name, accuracy[0], by_workers[hosted[-1]], statistics,
                        steps_to_target(accuracy[0].curve, target, higher_is_better), accuracy[0].overlap)
        methods[name] = method
        if name in OVERLAPPED_TWIN and OVERLAPPED_TWIN[name] not in by_method:
            methods[OVERLAPPED_TWIN[name]] = replace(method, name=OVERLAPPED_TWIN[name], overlap=True)
    return methods

