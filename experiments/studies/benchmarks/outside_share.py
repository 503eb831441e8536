"""The share of a hosted step spent outside the ranks' forward and backward (issue 36 item 4:
at most 10% for a hosted ResNet-18 at W = 16 on one GPU, for Top-k, DEFT, MiCRO and ExDyna).

A hosted process runs its ranks' forward/backward one after the other, so per logged step the
compute is W x `time/compute_ms_mean` (each rank's forward, backward and accumulate, synchronized)
and the rest of `time/step_ms` is the plan, the selections, the exchange, the residuals and the
optimizer step. The median over the steps from `warmup_steps` on. Read by the GPU check
(experiments/studies/benchmarks/gpu_check.sh):

    python -c "from experiments.studies.benchmarks.outside_share import print_shares; print_shares(['RUN_DIR', ...])"
"""
from __future__ import annotations

import statistics
from pathlib import Path

from experiments.runformat import metric_keys as keys
from experiments.runformat import run_dir as files

TARGET = 0.10


def outside_share(rows: list[dict], workers: int, warmup_steps: int = 0) -> dict[str, float]:
    """Medians over the train rows from `warmup_steps` on: step ms, compute ms (all hosted ranks)
    and the share of the step outside compute."""
    timed = [row for row in rows if row.get("kind") == "train" and row["step"] >= warmup_steps
             and row.get(keys.STEP) is not None and row.get(keys.COMPUTE_MEAN) is not None]
    if not timed:
        raise ValueError("no timed train rows (log_every=1 and steps past warmup_steps are needed)")
    shares = [1.0 - workers * row[keys.COMPUTE_MEAN] / row[keys.STEP] for row in timed]
    return {"step_ms": statistics.median(row[keys.STEP] for row in timed),
            "compute_ms": statistics.median(workers * row[keys.COMPUTE_MEAN] for row in timed),
            "select_ms_mean": statistics.median(row.get(keys.SELECT_MEAN) or 0.0 for row in timed),
            "exchange_ms": statistics.median(row.get(keys.EXCHANGE) or 0.0 for row in timed),
            "outside_share": statistics.median(shares), "steps": len(timed)}


def run_share(run_dir: Path) -> dict[str, float]:
    config = files.try_read_yaml(run_dir / files.CONFIG) or {}
    rows = files.read_metrics(run_dir / files.METRICS)
    return {"sparsifier": config["sparsifier"]["name"], "workers": config["workers"],
            **outside_share(rows, config["workers"], config.get("warmup_steps", 0))}


def print_shares(run_dirs: list[str]) -> None:
    print(f"{'method':<8}{'W':>4}{'step ms':>10}{'compute':>10}{'select':>9}{'exchange':>10}{'outside':>9}  target <= {TARGET:.0%}")
    for run_dir in run_dirs:
        share = run_share(Path(run_dir))
        verdict = "ok" if share["outside_share"] <= TARGET else "MISSED"
        print(f"{share['sparsifier']:<8}{share['workers']:>4}{share['step_ms']:>10.1f}{share['compute_ms']:>10.1f}"
              f"{share['select_ms_mean']:>9.2f}{share['exchange_ms']:>10.2f}{share['outside_share']:>9.1%}  {verdict}")
