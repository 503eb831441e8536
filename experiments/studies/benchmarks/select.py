"""Selection benchmark: per-rank `select` time of every sparsifier at W = 1, 4, 16, 64 on a
vector shaped like CIFAR ResNet-18's gradients (N = 11,173,962), density 0.001, beside two
baselines measured in the same run: copying N/W elements (the floor for any method that reads
its share once) and torch.topk over all N. Each method runs on both selection-kernel paths
(`[torch]`, the reference, and `[auto]`, the compiled kernels), and the last lines check the
targets: threshold scans within 2x the copy of the elements they scan, top-k methods at least
3x faster than torch.topk (Top-k) or their torch path (DEFT, CLT-k).

    python -m experiments.studies.benchmarks.select [--repeats 7] [--workers 1,4,16,64] [--methods topk,micro]
        [--device cuda] [--out select.json]

Times are medians of repeats, in milliseconds, for rank 0. `--device cuda` (`make bench
MODE=select DEVICE=cuda`) runs the same on the GPU: the vector lives there, every timed call sits
between two `torch.cuda.synchronize()` (a kernel still in the queue is not done), the baselines
are a device copy of N floats and torch.topk(|acc|, k) over all N, and only the `auto` path runs
(the compiled kernels are CPU code; on CUDA both paths are torch's). `--out` writes the numbers as
JSON (N, k, device, torch, copy_ms, topk_ms, rows of method, backend, W, count, select_ms,
plan_ms), the layout of the first H200 measurement (docs/speed.md). Every method first runs a few steps
so adaptive thresholds settle; feedback assumes every rank selected as many as rank 0 (one
process cannot afford 64 full-size ranks). For methods with a leader (DEFT, CLT-k), `select` is
rank 0's cost as a follower (W > 1) and the plan line is the leader's extra cost.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from experiments.studies.benchmarks.resnet18_layout import resnet18_cifar_layout
from experiments.engine.rank.build import build_sparsifier
from experiments.engine.launcher.compose import compose_job
from sparsifiers.common.capabilities import leader_of
from sparsifiers.common.exchange_kinds import Feedback
from sparsifiers.common.kernels import set_backend
from sparsifiers.registry import chosen, names
from sparsifiers.common.threshold_control import initial_threshold

SETTLE_STEPS = 8
# The methods the selection targets are set for (print_targets), by what their select does:
SCANS_SHARE = chosen("micro", "exdyna")  # scan N / W elements
SCANS_WHOLE = chosen("threshold", "sage")  # scan all N (W times the N / W copy)
TOPK_METHODS = chosen("topk", "deft", "cltk")


def median_ms(function, repeats: int, device: torch.device | str = "cpu", before=None) -> float:
    """The median of `repeats` calls; on CUDA each call is timed between two synchronizations
    (after one untimed call), so a time is the kernels' and not their launch. `before`, if
    given, runs untimed before each call (`fresh_step`)."""
    synchronize = _synchronizer(device)
    if synchronize is not None:
        function()
    times = []
    for _ in range(repeats):
        if before is not None:
            before()
        if synchronize is not None:
            synchronize()
        start = time.perf_counter()
        function()
        if synchronize is not None:
            synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def fresh_step(acc: torch.Tensor):
    """Makes each timed repeat a fresh step's: a select caches what it derives from acc at a
    step (DEFT's unit norms, keyed by step and acc's version), so a repeat at the same step
    would skip that pass over N. Multiplying by 1 in place bumps acc's version and keeps its
    bits (-0.0 and NaN included)."""
    return lambda: acc.mul_(1)


def _synchronizer(device: torch.device | str):
    device = torch.device(device)
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None


def device_problem(device: str, cuda_available: bool) -> str | None:
    """Why the benchmark cannot run on `device` here, as one line naming the fix; None if it can."""
    if device == "cuda" and not cuda_available:
        return ("--device cuda: no GPU here (torch.cuda.is_available() is False); run it on a machine with "
                "CUDA, or drop DEVICE=cuda / --device for the CPU")
    return None


def device_name(device: str) -> str:
    """The device as the JSON names it: the GPU's name on CUDA, "cpu" otherwise."""
    return torch.cuda.get_device_name(0) if device == "cuda" else "cpu"


def gradient_like(numel: int, seed: int = 0) -> torch.Tensor:
    """Heavy-tailed, like real gradients: Student-t with 3 degrees of freedom, scaled."""
    generator = torch.Generator().manual_seed(seed)
    normal = torch.randn(numel, generator=generator)
    chi = torch.randn(numel, 3, generator=generator).square().sum(1)
    return normal / (chi / 3).sqrt() * 1e-3


def at_operating_point(acc: torch.Tensor, density: float) -> torch.Tensor:
    """acc scaled so that its k-th largest magnitude is the threshold methods' starting lambda,
    1 / (2 sqrt(k)): they then select about k, as they do once their thresholds have settled
    (unscaled, lambda would select 18 k here, a regime no settled run is in)."""
    k = int(density * acc.numel())
    kth = float(torch.topk(acc.abs(), k, sorted=False).values.min())
    return acc.mul_(initial_threshold(k) / kth)


def time_method(name: str, workers: int, acc: torch.Tensor, layout, density: float, repeats: int,
                record: dict | None = None) -> tuple[float, float | None]:
    """rank 0's select time and its leader's plan time (None: no plan), medians in ms, on acc's
    device; `record` gets the selection's size at the last settle step (`count`)."""
    cfg = compose_job([f"sparsifier={name}", f"workers={workers}", f"sparsifier.density={density}",
                       "dataset=synthetic", "model=mlp"])
    sparsifier = build_sparsifier(cfg, layout, rank=0)
    step = 0

    def one_step() -> int:
        nonlocal step
        sparsifier.precondition(acc)  # as the step does (Accordion's detection reads its norms)
        plan = sparsifier.make_plan(acc, step) if leader_of(sparsifier, step) is not None else None
        selection = sparsifier.select(acc, step, plan)
        count = acc.numel() if selection is None else selection.numel()
        counts = torch.full((workers,), count, dtype=torch.int64)
        sparsifier.observe(Feedback(step, counts, min(acc.numel(), count * workers)))
        step += 1
        return count

    for _ in range(SETTLE_STEPS):
        count = one_step()
    if record is not None:
        record["count"] = count
    while workers > 1 and leader_of(sparsifier, step) == 0:
        step += 1  # time rank 0 as a follower: the leader's cost is the plan line
    plan_ms = None
    sparsifier.precondition(acc)
    if leader_of(sparsifier, step) is not None:
        plan_ms = median_ms(lambda: sparsifier.make_plan(acc, step), repeats, acc.device, fresh_step(acc))
    plan = sparsifier.make_plan(acc, step) if leader_of(sparsifier, step) is not None else None
    select_ms = median_ms(lambda: sparsifier.select(acc, step, plan), repeats, acc.device, fresh_step(acc))
    return select_ms, plan_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--workers", default="1,4,16,64")
    parser.add_argument("--density", type=float, default=0.001)
    parser.add_argument("--methods", default=None, help="comma-separated; default: every sparsifier that selects "
                        "(not the dense baselines or PowerSGD)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: one core per rank)")
    parser.add_argument("--backends", default=None, help="selection kernels to compare (sparsifiers/common/kernels); "
                        "default torch,auto on the CPU, auto on CUDA")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the vector and the selection live")
    parser.add_argument("--out", type=Path, default=None, help="also write the numbers as JSON to this file")
    args = parser.parse_args()
    problem = device_problem(args.device, torch.cuda.is_available())
    if problem:
        print(problem, file=sys.stderr)
        sys.exit(2)
    torch.set_num_threads(args.threads)
    # The dense exchanges and PowerSGD's low-rank one select nothing: no selection to time.
    methods = args.methods.split(",") if args.methods else sorted(names(selects=True))
    workers = [int(w) for w in args.workers.split(",")]
    backends = (args.backends or ("auto" if args.device == "cuda" else "torch,auto")).split(",")
    device = torch.device(args.device)
    layout = resnet18_cifar_layout()
    acc = at_operating_point(gradient_like(layout.numel), args.density).to(device)
    k = int(args.density * layout.numel)
    on = "" if args.device == "cpu" else f", on {device_name(args.device)} (synchronized)"
    print(f"N = {layout.numel:,} (CIFAR ResNet-18), density {args.density} (k = {k:,}), "
          f"{args.threads} thread(s), median of {args.repeats}, milliseconds per rank{on}")

    header = f"{'method':<28}" + "".join(f"{'W=' + str(w):>12}" for w in workers)
    print(header)
    print("-" * len(header))
    copy_row, destination = [], torch.empty_like(acc)
    for w in workers:
        share = layout.numel // w
        copy_row.append(median_ms(lambda: destination[:share].copy_(acc[:share]), args.repeats, device))
    print(f"{'floor: copy N/W elements':<28}" + "".join(f"{t:>12.2f}" for t in copy_row))
    copy_all_ms = median_ms(lambda: destination.copy_(acc), args.repeats, device)
    magnitude = torch.empty_like(acc)
    topk_ms = median_ms(lambda: torch.topk(torch.abs(acc, out=magnitude), k, sorted=False), args.repeats, device)
    print(f"{'torch.topk over N':<28}" + "".join(f"{topk_ms:>12.2f}" for _ in workers))
    rows: list[dict] = []
    results: dict[tuple[str, str], list[float]] = {}
    plan_results: dict[tuple[str, str], list[float | None]] = {}
    for name in methods:
        for backend in backends:
            set_backend(backend)
            selects, plans = [], []
            for w in workers:
                row = {"method": name, "backend": backend, "W": w}
                select_ms, plan_ms = time_method(name, w, acc, layout, args.density, args.repeats, row)
                selects.append(select_ms)
                plans.append(plan_ms)
                rows.append({**row, "select_ms": select_ms, "plan_ms": plan_ms})
            results[(name, backend)] = selects
            plan_results[(name, backend)] = plans
            label = f"{name} [{backend}]"
            print(f"{label:<28}" + "".join(f"{t:>12.2f}" for t in selects))
            if any(p is not None for p in plans):
                print(f"{'  plan (leader)':<28}" + "".join(f"{p:>12.2f}" if p is not None else f"{'-':>12}" for p in plans))
    set_backend("auto")
    print_targets(results, plan_results, methods, backends, workers, copy_row, copy_all_ms, topk_ms)
    if args.out is not None:
        write_json(args.out, numbers_json(layout.numel, k, args.device, copy_all_ms, topk_ms, rows))
        print(f"\nwritten: {args.out}")


def numbers_json(numel: int, k: int, device: str, copy_ms: float, topk_ms: float, rows: list[dict]) -> dict:
    """What --out writes: the baselines of the run beside every (method, backend, W) row."""
    return {"N": numel, "k": k, "device": device_name(device), "torch": torch.__version__,
            "copy_ms": copy_ms, "topk_ms": topk_ms, "rows": rows}


def write_json(path: Path, numbers: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(numbers, indent=1) + "\n")


def print_targets(results, plan_results, methods, backends, workers, copy_row, copy_all_ms, topk_ms) -> None:
    """The issue's selection targets, from the numbers above: threshold scans within 2x the copy
    of what they scan; top-k methods at least 3x faster than their torch path (top-k: than
    torch.topk over N)."""
    if "auto" not in backends:
        return
    print("\ntargets (auto):")
    for name in methods:
        fast = _selection_cost(name, results[(name, "auto")], plan_results[(name, "auto")])
        if name in SCANS_SHARE or name in SCANS_WHOLE:
            copies = copy_row if name in SCANS_SHARE else [copy_all_ms] * len(workers)
            ratios = [t / c for t, c in zip(fast, copies)]
            verdict = "ok" if max(ratios) <= 2.0 else "MISSED"
            print(f"  {name:<12} scan / copy of scanned elements: " + ", ".join(f"W={w} {r:.2f}x" for w, r in zip(workers, ratios))
                  + f"  (target <= 2x) {verdict}")
        elif name in TOPK_METHODS:
            if name != "topk" and (name, "torch") not in results:
                continue
            baseline = [topk_ms] * len(workers) if name == "topk" else _selection_cost(
                name, results[(name, "torch")], plan_results[(name, "torch")])
            speedups = [b / t for b, t in zip(baseline, fast)]
            against = "torch.topk" if name == "topk" else "its torch path"
            verdict = "ok" if min(speedups) >= 3.0 else "MISSED"
            print(f"  {name:<12} speed-up over {against}: " + ", ".join(f"W={w} {x:.1f}x" for w, x in zip(workers, speedups))
                  + f"  (target >= 3x) {verdict}")



def _selection_cost(name: str, selects: list[float], plans: list[float | None]) -> list[float]:
    """Per W: the cost of the method's top-k. CLT-k's top-k is its leader's plan (a follower
    selects nothing, and at W = 1 the one rank selects in its plan); DEFT's plan is the unit
    norms and the bin packing, not a top-k, so its selection alone."""
    if name != "cltk":
        return selects
    return [s + (p or 0.0) for s, p in zip(selects, plans)]


if __name__ == "__main__":
    main()
