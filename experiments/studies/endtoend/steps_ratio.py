"""The steps ratio: how many steps a sparsifier needs to the target relative to the best dense
baseline, from runs that reach a target near convergence (docs/endtoend.md, "The steps ratio").

The target follows the best dense baseline (the dense preset with the highest mean final
accuracy on the full test set): that mean less `tolerance` (0.5 points by default). Each run's
steps to it are the steps done at its first evaluation at or above it; a diverged run
(experiments/runformat/divergence.py) never reaches it.

The ratio and its interval: per seed, the method's steps over dense's steps of the same seed
(paired by seed: both runs saw the same data order and initialisation, so their ratio cancels
what the seed shares), then the Student-t 95% interval of the mean of those ratios, as
uncertainty.py does for steps. A seed that never reached the target is censored: its ratio is at
least its last evaluated steps over dense's, which enters the lower end as a lower bound; the mean
is then unknown (None) and the upper end infinite. One paired seed gives no interval
(low = high = None), only its ratio.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable

import pandas as pd

from analysis.divergence import diverged_reasons
from analysis.load import load_runs
from analysis.stats import t_interval
from sparsifiers import registry

CONFIDENCE = 0.95
DEFAULT_TOLERANCE = 0.005  # the target: the best dense baseline's final accuracy less 0.5 points
ACCURACY = "eval/accuracy"
# Runs of one folder must agree on these (the runs-table column, what to call it).
SAME = (("model", "models"), ("dataset", "datasets"), ("env.device", "devices"))


@dataclass(frozen=True)
class StepsRatio:
    """One method's steps to the target over the best dense baseline's."""

    method: str
    workload: str
    mean: float | None
    low: float | None
    high: float | None  # 95% interval; math.inf when a seed never reached the target
    seeds: int
    reached: int
    source: str  # "laptop convergence sweep" | "runs in DIR" | "reported: <citation>"
    note: str = ""
    final: float | None = None  # the method's mean final accuracy over its seeds: how far short a censored one ends


def reported_ratios() -> dict[str, StepsRatio]:
    """The papers' tables: none. Neither the project's docs nor its design notes cite a paper's
    accuracy of a sparsifier and of dense after the same epochs with its table, and no number is
    taken from elsewhere (docs/endtoend.md, "The steps ratio")."""
    return {}


def _refuse_mixed(runs: pd.DataFrame, where: str) -> None:
    """ValueError naming the first key the runs differ in (sparsifiers' densities too)."""
    for column, plural in SAME:
        values = sorted({str(v) for v in runs[column].dropna()}) if column in runs.columns else []
        if len(values) > 1:
            raise ValueError(f"runs in {where} mix {plural} {' and '.join(values)}: give one per folder")
    sparse = runs[~runs["sparsifier"].map(_is_dense)]
    densities = sorted({float(d) for d in sparse["density"].dropna()})
    if len(densities) > 1:
        raise ValueError(f"runs in {where} mix densities {' and '.join(f'{d:g}' for d in densities)}: "
                         "give one density per folder")
    limited = runs["cfg.eval_limit"].dropna() if "cfg.eval_limit" in runs.columns else pd.Series([], dtype=object)
    if len(limited):
        raise ValueError(f"runs in {where} were evaluated on part of the test set (eval_limit={limited.iloc[0]}): "
                         "the target needs the full test set (eval_limit=null)")


def _is_dense(name: str) -> bool:
    return name in registry.names() and registry.method(name).dense_baseline


def _curves(tables) -> dict[str, list[tuple[int, float]]]:
    """Per run_id: (steps done, accuracy) of every evaluation, in step order (the logged step
    counts from 0, as runs.py reads it)."""
    epochs = tables.epochs
    if ACCURACY not in epochs.columns:
        return {}
    rows = epochs.dropna(subset=[ACCURACY]).sort_values("step")
    return {run_id: list(zip(group["step"].astype(int) + 1, group[ACCURACY].astype(float)))
            for run_id, group in rows.groupby("run_id")}


def _steps_to(curve: list[tuple[int, float]], target: float) -> int | None:
    return next((step for step, accuracy in curve if accuracy >= target), None)


def _interval(values: list[float], censored: bool) -> tuple[float | None, float | None, float | None]:
    """(mean, low, high) of per-seed ratios; module docstring."""
    mean, low, high = t_interval(values, CONFIDENCE)
    if low is None:
        return (None if censored else mean), None, (math.inf if censored else None)
    low = max(0.0, low)  # a ratio of steps is not negative
    return (None, low, math.inf) if censored else (mean, low, high)


def _mean_final(run_ids, curves: dict) -> float:
    """The mean over runs of each run's last evaluated accuracy (NaN for a run never evaluated)."""
    return statistics.fmean(curves[i][-1][1] if curves.get(i) else math.nan for i in run_ids)


def _best_dense(runs: pd.DataFrame, curves: dict, where: str) -> tuple[str, float]:
    """The best dense baseline's name and its mean final accuracy."""
    dense = runs[runs["sparsifier"].map(_is_dense)]
    if dense.empty:
        raise ValueError(f"runs in {where} hold no dense baseline: add sparsifier=dense runs of the same workload")
    finals = dense.groupby("sparsifier")["run_id"].agg(lambda ids: _mean_final(ids, curves))
    name = str(finals.idxmax())
    return name, float(finals.max())


def _seed_steps(runs: pd.DataFrame, curves: dict, target: float, diverged: pd.Series) -> dict[int, tuple[int | None, int]]:
    """Per seed: (steps to the target or None, steps done at the last evaluation)."""
    out = {}
    for run_id, seed in zip(runs["run_id"], runs["seed"]):
        curve = curves.get(run_id, [])
        reached = None if diverged.get(run_id) else _steps_to(curve, target)
        out[int(seed)] = (reached, curve[-1][0] if curve else 0)
    return out


def steps_ratios_from_runs(run_dirs: Iterable[Path], tolerance: float = DEFAULT_TOLERANCE,
                           source: str | None = None) -> dict[str, StepsRatio]:
    """Each sparsifier's StepsRatio (module docstring) from the runs at or below `run_dirs`.

    Refuses (ValueError, naming the difference) runs of several workloads, devices or densities,
    a folder without a dense baseline, and runs evaluated on part of the test set."""
    paths = [Path(p) for p in run_dirs]
    where = ", ".join(str(p) for p in paths)
    tables = load_runs(paths, cache=False)
    runs = tables.runs
    if runs.empty:
        raise ValueError(f"no runs in {where}: give a folder of run directories (config.yaml, metrics.jsonl)")
    _refuse_mixed(runs, where)
    curves, diverged = _curves(tables), diverged_reasons(tables)
    dense_name, final = _best_dense(runs, curves, where)
    target = final - tolerance
    dense = _seed_steps(runs[runs["sparsifier"] == dense_name], curves, target, diverged)
    workload = f"{runs['model'].iloc[0]} on {runs['dataset'].iloc[0]}"
    ratios = {}
    for method, group in runs[~runs["sparsifier"].map(_is_dense)].groupby("sparsifier"):
        ratio = _ratio(str(method), _seed_steps(group, curves, target, diverged), dense, workload,
                       source or f"runs in {where}", f"target {target:.4f} ({dense_name}'s final {final:.4f} less {tolerance:g})")
        ratios[str(method)] = replace(ratio, final=_mean_final(group["run_id"], curves))
    return ratios


def _ratio(method: str, steps: dict, dense: dict, workload: str, source: str, note: str) -> StepsRatio:
    """Pair the method's seeds with dense's; a pair whose dense seed missed the target is left out."""
    values, censored, reached = [], False, 0
    for seed, (mine, last) in sorted(steps.items()):
        theirs = dense.get(seed, (None, 0))[0]
        if not theirs:
            continue
        values.append((mine if mine is not None else last) / theirs)
        censored |= mine is None
        reached += mine is not None
    if not values:
        return StepsRatio(method, workload, None, None, None, 0, 0, source, note + "; no seed paired with dense's")
    mean, low, high = _interval(values, censored)
    return StepsRatio(method, workload, mean, low, high, len(values), reached, source, note)
