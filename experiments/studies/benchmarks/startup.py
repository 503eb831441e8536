"""Start-up benchmark: where the wall time of one run goes besides training.

    python -m experiments.studies.benchmarks.startup [--repeats 3] [-- run.py overrides]   # make bench MODE=startup

Runs `python run.py` (by default `experiment=quickstart sparsifier=topk`: one quickstart job, 4
gloo ranks, one epoch) `--repeats` times, each into its own temporary run directory, and splits
each run's wall time with the times its own files record, so nothing is instrumented:

  before launch    command start -> status.json `started` (imports, composing and validating
                   the config, the run directory)
  launch -> train  -> rank 0's training loop starts (summary.json's mtime - its wall_s): the
                   kernels compiled if this machine has not, torchrun, the ranks' imports, W&B,
                   data, model, kernel warm-up
  train + eval     summary.json's wall_s: every step and the evaluation
  after training   -> status.json `ended` (summary written, the ranks and torchrun gone)
  exit             -> the command's end (run.py's own exit)

The first repeat may pay once-per-machine costs (numba compiling the kernels, the decoded
dataset cache); the medians are over all repeats, each repeat is printed too. On a shared
machine the numbers are noisy: compare medians of runs made side by side.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from experiments.runformat.run_dir import STATUS, SUMMARY

REPO = Path(__file__).resolve().parents[3]
DEFAULT_OVERRIDES = ["experiment=quickstart", "sparsifier=topk", "logger.progress=false"]
PHASES = ("before launch", "launch -> train", "train + eval", "after training", "exit", "total")


def one_run(overrides: list[str], run_dir: Path, env: dict[str, str]) -> dict[str, float]:
    """Runs run.py once into `run_dir`; returns its phases in seconds."""
    started = time.time()
    result = subprocess.run([sys.executable, str(REPO / "run.py"), *overrides, f"hydra.run.dir={run_dir}"],
                            cwd=REPO, env=env, capture_output=True, text=True)
    ended = time.time()
    if result.returncode != 0:
        raise SystemExit(f"run.py failed ({result.returncode}):\n{result.stderr[-3000:]}")
    status = json.loads((run_dir / STATUS).read_text())
    summary = json.loads((run_dir / SUMMARY).read_text())
    summary_written = (run_dir / SUMMARY).stat().st_mtime
    training_started = summary_written - summary["wall_s"]
    return {
        "before launch": status["started"] - started,
        "launch -> train": training_started - status["started"],
        "train + eval": summary["wall_s"],
        "after training": status["ended"] - summary_written,
        "exit": ended - status["ended"],
        "total": ended - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-dataset-cache", action="store_true",
                        help="SPARSEBENCH_CACHE_DIR= (every process decodes the dataset, as before the cache)")
    parser.add_argument("overrides", nargs="*", help=f"run.py overrides (default: {' '.join(DEFAULT_OVERRIDES)})")
    args = parser.parse_args()
    overrides = args.overrides or DEFAULT_OVERRIDES
    env = dict(os.environ)
    if args.no_dataset_cache:
        env["SPARSEBENCH_CACHE_DIR"] = ""
    runs = []
    with tempfile.TemporaryDirectory(prefix="sparsebench-startup-") as root:
        for repeat in range(args.repeats):
            runs.append(one_run(overrides, Path(root) / f"run{repeat}", env))
            print(f"repeat {repeat + 1}: " + ", ".join(f"{name} {runs[-1][name]:.2f} s" for name in PHASES), flush=True)
    print(f"python run.py {' '.join(overrides)}; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
          f"medians of {args.repeats}:")
    for name in PHASES:
        values = [run[name] for run in runs]
        print(f"{name:<16} {statistics.median(values):7.2f} s   ({', '.join(f'{value:.2f}' for value in values)})")


if __name__ == "__main__":
    main()
