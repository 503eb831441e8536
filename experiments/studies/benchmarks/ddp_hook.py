"""DDP hook benchmark: a torchvision model trained with real DDP in W gloo processes (one torch
thread each), once with DDP's own all-reduce (the baseline, no hook) and once per method through
sparsebench's communication hook (experiments/engine/ddp), all in the same processes, side by side.

    python -m experiments.studies.benchmarks.ddp_hook [--workers 2] [--model resnet18] [--methods dense,topk,deft,micro,exdyna]
        [--density 0.001] [--batch-size 8] [--image-size 32] [--repeats 10] [--settle 20] [--json results.json]

Each method runs `--settle` untimed steps (MiCRO's and ExDyna's thresholds start far from where
error feedback leaves them), then `--repeats` timed ones (forward, backward with the
hook, optimizer step). Printed per method, rank 0's medians: the whole step; the hook's step after the
last bucket (`hook/total_ms`), its selection and exchange and the rest of it (accumulate, the
non-finite agreement, the norms and the stats' gather); the copies of the buckets in and of the
aggregate out (`hook/copy_ms`); the buckets assembled, |U| / k and the traffic against the dense
all-reduce of the same model. `dense` through the hook beside DDP's own all-reduce is the price
of the model-wide assembly alone.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from experiments.runformat import metric_keys as keys
from sparsifiers.registry import chosen

BASELINE = "ddp_allreduce"


def train_steps(model, optimizer, images, labels, count: int, hook=None) -> list[dict[str, float]]:
    rows = []
    for step in range(count):
        started = time.perf_counter()
        optimizer.zero_grad(set_to_none=False)
        torch.nn.functional.cross_entropy(model(images[step % len(images)]), labels[step % len(labels)]).backward()
        optimizer.step()
        rows.append({"step_ms": (time.perf_counter() - started) * 1e3, **(hook.stats if hook is not None else {})})
    return rows


def measure(args: argparse.Namespace) -> list[dict]:
    """In every rank: the baseline, then each method; rank 0's medians."""
    import torchvision
    from torch.nn.parallel import DistributedDataParallel

    from experiments.engine.ddp import register_sparsifier

    rank = dist.get_rank()
    generator = torch.Generator().manual_seed(rank)
    images = [torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=generator) for _ in range(4)]
    labels = [torch.randint(0, 10, (args.batch_size,), generator=generator) for _ in range(4)]
    results = []
    for method in [BASELINE, *args.methods.split(",")]:
        torch.manual_seed(0)
        model = DistributedDataParallel(torchvision.models.get_model(args.model, num_classes=10))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        hook = None if method == BASELINE else register_sparsifier(model, method, density=args.density)
        train_steps(model, optimizer, images, labels, args.settle, hook)
        rows = train_steps(model, optimizer, images, labels, args.repeats, hook)

        def median(key: str) -> float | None:
            values = [row[key] for row in rows if key in row]
            return statistics.median(values) if values else None

        row = {"method": method, "step_ms": median("step_ms")}
        if hook is not None:
            total, select, exchange = median(keys.HOOK_TOTAL), median(keys.HOOK_SELECT), median(keys.HOOK_EXCHANGE)
            row.update(hook_ms=total, select_ms=select, exchange_ms=exchange, copy_ms=median(keys.HOOK_COPY),
                       rest_ms=statistics.median(r[keys.HOOK_TOTAL] - r[keys.HOOK_SELECT] - r[keys.HOOK_EXCHANGE] for r in rows),
                       buckets=median(keys.HOOK_BUCKETS), union_over_k=median(keys.DENSITY_ERROR) + 1.0,
                       traffic_ratio=median(keys.RATIO), numel=hook.layout.numel)
        results.append(row)
        dist.barrier()
    return results if rank == 0 else []


def print_table(args: argparse.Namespace, rows: list[dict]) -> None:
    numel = next((row["numel"] for row in rows if "numel" in row), None)
    print(f"DDP hook benchmark: {args.model} (N = {numel:,}), W = {args.workers} gloo processes, batch {args.batch_size} "
          f"of {args.image_size}x{args.image_size}, density {args.density}, medians of {args.repeats} steps (rank 0)")
    header = (f"{'method':<14} {'step ms':>9} {'hook ms':>9} {'select':>9} {'exchange':>9} {'rest':>8} {'copies':>8} "
              f"{'buckets':>8} {'|U|/k':>7} {'traffic':>8}")
    print(header)
    print("-" * len(header))
    for row in rows:
        if row["method"] == BASELINE:
            print(f"{row['method']:<14} {row['step_ms']:>9.1f} {'(DDP own all-reduce, no hook)':>55}")
            continue
        print(f"{row['method']:<14} {row['step_ms']:>9.1f} {row['hook_ms']:>9.1f} {row['select_ms']:>9.1f} "
              f"{row['exchange_ms']:>9.1f} {row['rest_ms']:>8.1f} {row['copy_ms']:>8.1f} {row['buckets']:>8.0f} {row['union_over_k']:>7.2f} "
              f"{row['traffic_ratio']:>8.4f}")


def child(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    try:
        rows = measure(args)
        if rows:
            Path(args.result).write_text(json.dumps(rows))
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--methods", default=",".join(chosen("dense", "topk", "deft", "micro", "exdyna")))
    parser.add_argument("--density", type=float, default=0.001)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--settle", type=int, default=20)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    with tempfile.TemporaryDirectory(prefix="ddp-bench-") as folder:
        result = Path(folder, "rows.json")
        command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={args.workers}", "--max-restarts=0",
                   "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:0", "-m", "experiments.studies.benchmarks.ddp_hook",
                   *sys.argv[1:], "--child", "--result", str(result)]
        environment = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
        subprocess.run(command, check=True, env=environment)
        rows = json.loads(result.read_text())
    print_table(args, rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
