"""Memory of hosted ranks: one process hosting L ranks needs about

    model (parameters + flat gradient + optimizer state) + L x residual (N x 4 bytes)
    + the method's own per-rank state + one set of full-size scratch buffers (shared)

(experiments/engine/launcher/resources.py, the estimate validation refuses jobs by). This benchmark measures
peak resident memory of a real hosted session (set-up plus a few training steps) for several L,
in fresh processes, and prints it beside that formula.

    python -m experiments.studies.benchmarks.hosted_memory [--ranks 1,8,32,64] [--method topk]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

MODEL = ["dataset=synthetic", "dataset.image_size=28", "dataset.num_train=8192", "dataset.num_test=64",
         "model=mlp", "model.hidden=1024", "batch_size=16"]


def measure(ranks: int, method: str, steps: int) -> dict:
    """Runs in a fresh process: peak RSS after set-up and `steps` steps with `ranks` hosted ranks."""
    import torch

    from experiments.engine.launcher.compose import compose_job
    from experiments.engine.launcher.resources import estimate, method_vectors
    from experiments.engine.core.step import train_step
    from experiments.engine.rank.train import build_session
    from experiments.engine.core.world import init_world

    torch.set_num_threads(1)
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    world = init_world(ranks, "cpu", "gloo", timeout_s=60)
    session = build_session(compose_job([f"sparsifier={method}", f"workers={ranks}", "processes=1", *MODEL]), world)
    batches = [iter(r.batches.epoch(0)) for r in session.replicas]
    for step in range(steps):
        train_step(session.ranks, session.model, session.task, session.optimizer,
                   session.replicas, [next(b) for b in batches], step, measure_norms=False)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    per_rank = estimate(session.layout.numel, ranks, 1, 1, 0, 0, method_vectors(session.method.owns_momentum)).per_rank_bytes
    return {"ranks": ranks, "numel": session.layout.numel, "peak": peak, "baseline": baseline, "per_rank": per_rank}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", default="1,8,32,64")
    parser.add_argument("--method", default="topk")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(measure(args.child, args.method, args.steps)))
        return
    rows = []
    for ranks in (int(r) for r in args.ranks.split(",")):
        output = subprocess.run([sys.executable, "-m", "experiments.studies.benchmarks.hosted_memory", "--child", str(ranks),
                                 "--method", args.method, "--steps", str(args.steps)],
                                capture_output=True, text=True, check=True).stdout
        rows.append(json.loads(output.strip().splitlines()[-1]))
    first = rows[0]
    residual_mb = first["numel"] * 4 / 2**20
    print(f"{args.method}, MLP with N = {first['numel']:,} gradient elements: one residual = {residual_mb:.1f} MiB")
    print(f"{'hosted ranks':>12} {'peak RSS MiB':>13} {'vs 1 rank MiB':>14} {'predicted MiB':>14} {'residuals per extra rank':>25}")
    for row in rows:
        extra = (row["peak"] - first["peak"]) / 2**20
        predicted = (row["ranks"] - first["ranks"]) * row["per_rank"] / 2**20  # resources.estimate's per-rank part
        per_rank = extra / residual_mb / (row["ranks"] - first["ranks"]) if row["ranks"] > first["ranks"] else float("nan")
        print(f"{row['ranks']:>12} {row['peak'] / 2**20:>13.1f} {extra:>14.1f} {predicted:>14.1f} {per_rank:>25.2f}")


if __name__ == "__main__":
    main()
