"""Load benchmark: how long the analysis takes to load a large study.

    python -m experiments.studies.benchmarks.load [--runs 1000 --steps 1000]    # make bench MODE=load

Writes synthetic run directories (analysis.synthetic) into a temporary folder, then times
load_runs three ways, each the median of --repeats:
  parse   no cache at all (metrics.jsonl parsed every time)
  cold    no cache yet: parse, then write the cache
  cached  the cache (.analysis_cache/, Arrow IPC) is present and current
The files stay in the OS page cache between repeats, as they would on a second look at a sweep;
"cold" means without our cache, not without the operating system's.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

from analysis.load import load_runs
from analysis.metrics_io import CACHE_DIR
from analysis.synthetic import SyntheticRun, metrics_text, write_run
from sparsifiers.registry import chosen

# The benchmark's mix of runs (its timings are comparable only while it stays the same).
METHODS = chosen("dense", "topk", "dgc", "cltk", "threshold", "sage", "micro", "exdyna", "deft", "gaussiank")
WORKERS = (2, 4, 8, 16)


def generate(root: Path, runs: int, steps: int) -> None:
    """`runs` run directories: methods x worker counts x seeds. Runs that differ only in seed
    share their metrics text, which keeps generation to seconds; every file is still read."""
    texts: dict[tuple[str, int], str] = {}
    for number in range(runs):
        method, workers = METHODS[number % len(METHODS)], WORKERS[(number // len(METHODS)) % len(WORKERS)]
        seed = number // (len(METHODS) * len(WORKERS))
        run = SyntheticRun(method=method, workers=workers, seed=seed, steps=steps, epochs=10, group="bench")
        if (method, workers) not in texts:
            texts[method, workers] = metrics_text(run)
        write_run(root / f"{number}_{method}_w{workers}_s{seed}", run, texts[method, workers])


def clear_caches(root: Path) -> None:
    """Removes every run's cached metrics, so the next load parses the JSON again."""
    for cache in root.rglob(CACHE_DIR):
        shutil.rmtree(cache)


def timed(repeats: int, action: Callable[[], object], before: Callable[[], None] = lambda: None) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds (all threads) taken by `action`, `repeats` times, with `before` run
    untimed ahead of each. CPU time shows the cost when other jobs share the machine."""
    wall, cpu = [], []
    for _ in range(repeats):
        before()
        started, started_cpu = time.perf_counter(), time.process_time()
        action()
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return wall, cpu


def main() -> None:
    """Generates (or reuses) the runs and prints the three timings."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=1000, help="logged train steps per run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="reuse or keep the runs here (default: a temp dir, removed)")
    args = parser.parse_args()

    root = args.dir or Path(tempfile.mkdtemp(prefix="sparsebench-bench-"))
    try:
        if not any(root.glob("*/metrics.jsonl")):
            started = time.perf_counter()
            generate(root, args.runs, args.steps)
            print(f"generated {args.runs} runs x {args.steps} steps in {time.perf_counter() - started:.1f} s")
        size = sum(path.stat().st_size for path in root.glob("*/metrics.jsonl")) / 1e6
        print(f"{root}: {size:,.0f} MB of metrics.jsonl")
        tables = load_runs(root, cache=False)
        print(f"tables: runs {len(tables.runs):,}, steps {len(tables.steps):,} x {tables.steps.shape[1]}, "
              f"epochs {len(tables.epochs):,}")
        results = {
            "parse (no cache)": timed(args.repeats, lambda: load_runs(root, cache=False)),
            "cold (parse + write cache)": timed(args.repeats, lambda: load_runs(root), lambda: clear_caches(root)),
            "cached (Arrow IPC)": timed(args.repeats, lambda: load_runs(root)),
        }
        print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; medians of {args.repeats}:")
        for name, (wall, cpu) in results.items():
            print(f"{name:<28} wall {statistics.median(wall):6.2f} s   cpu {statistics.median(cpu):6.2f} s"
                  f"   (wall: {', '.join(f'{s:.2f}' for s in wall)})")
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
