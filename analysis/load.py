"""Run and sweep directories -> the tidy tables of analysis.tables.

    from analysis.load import load_runs
    tables = load_runs(["outputs/sweeps/2026-11-29_17-49-22"])
    tables.runs, tables.steps, tables.epochs

Any mix of run directories, sweep directories and whole output trees may be given; they are
searched recursively. Reading runs is spread over threads (Arrow's parser releases the GIL).
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa

from analysis.discover import find_run_dirs
from analysis.metrics_io import read_metrics_file
from analysis.runinfo import read_run_info
from analysis.tables import RunTables, assemble
from experiments.runformat.run_dir import METRICS

ENV_RUNS = "SPARSEBENCH_RUNS"
REPO_ROOT = Path(__file__).resolve().parents[1]


def default_run_paths() -> list[Path]:
    """$SPARSEBENCH_RUNS (several paths separated by os.pathsep), else the repository's outputs/.

    Resolved against the repository, not the working directory, so notebooks (which run in
    analysis/) and the command line find the same runs.
    """
    value = os.environ.get(ENV_RUNS)
    if not value:
        return [REPO_ROOT / "outputs"]
    return [Path(part) for part in value.split(os.pathsep) if part]


def load_runs(paths: Iterable[str | os.PathLike] | str | os.PathLike, cache: bool = True, threads: int | None = None) -> RunTables:
    """Every run at or below `paths` as runs/steps/epochs tables.

    cache: keep a columnar copy of each metrics.jsonl next to it (in .analysis_cache/), reused
    while the file's size and modification time are unchanged (analysis.metrics_io).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    run_dirs = find_run_dirs(paths)
    threads = threads or min(32, 2 * (os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=threads) as pool:
        loaded = list(pool.map(lambda run_dir: _load_one(run_dir, cache), run_dirs))
    return assemble(*(list(part) for part in zip(*loaded))) if loaded else assemble([], [], [])


def _load_one(run_dir: Path, cache: bool) -> tuple[dict[str, Any], pa.Table | None, pa.Table | None]:
    """One run's description, train rows and eval rows."""
    info = read_run_info(run_dir)
    metrics = read_metrics_file(run_dir / METRICS, cache=cache)
    info["metrics_cut"] = bool(metrics and metrics.cut)
    info["bad_lines"] = metrics.bad_lines if metrics else 0
    if metrics is None:
        return info, None, None
    return info, metrics.train, metrics.evals
