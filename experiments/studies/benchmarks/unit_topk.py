"""DEFT's per-unit top-k on its own, the two batched paths side by side (issue #48): classed_topk
(one torch.topk per class of lengths, what a GPU runs now) and segmented_topk (two sorts of the share,
what it ran before), on rank 0's bin of DEFT at the CIFAR ResNet-18 layout, d = 0.001. Each W's
two answers are checked equal, then each is timed: the median of `--repeats` calls, every call
between two synchronizations on CUDA. The GPU check runs it (gpu_check.sh, OUT/unit_topk.txt).

    make bench MODE=unit_topk DEVICE=cuda [ARGS="--workers 1,4,16,64 --repeats 15"]
"""
from __future__ import annotations

import argparse
import sys

import torch

from experiments.studies.benchmarks.select import at_operating_point, device_name, device_problem, gradient_like, median_ms
from sparsifiers.common.deft_allocation import allocate, common_units, make_units, unit_cost, unit_k
from sparsifiers.common.kernels.classed_topk import classed_topk
from sparsifiers.common.kernels.segmented import segmented_topk, unit_norms


def rank0_bin(layout, workers: int, acc: torch.Tensor, density: float) -> tuple[list[int], list[int], list[int]]:
    """(starts, lengths, k_l) of the units DEFT's rank 0 selects at step 0 (its steps 1-3)."""
    units = make_units(layout, workers)
    sizes = [end - start for start, end in units]
    ks = unit_k(unit_norms(acc, sizes).tolist(), sizes, max(1, int(density * layout.numel)))
    common = common_units(ks, sizes)
    mine = allocate([unit_cost(size, k) for size, k in zip(sizes, ks)], common, workers)[0]
    return [units[u][0] for u in mine], [sizes[u] for u in mine], [ks[u] for u in mine]


def main() -> None:
    from experiments.studies.benchmarks.resnet18_layout import resnet18_cifar_layout

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--workers", default="1,4,16,64")
    parser.add_argument("--density", type=float, default=0.001)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    problem = device_problem(args.device, torch.cuda.is_available())
    if problem:
        print(problem, file=sys.stderr)
        sys.exit(2)
    layout = resnet18_cifar_layout()
    acc = at_operating_point(gradient_like(layout.numel), args.density).to(args.device)
    print(f"DEFT's per-unit top-k of rank 0's bin, ResNet-18 layout (N = {layout.numel:,}), d = {args.density}, "
          f"on {device_name(args.device)}: median ms of {args.repeats}")
    for workers in (int(w) for w in args.workers.split(",")):
        starts, lengths, ks = rank0_bin(layout, workers, acc, args.density)
        classed = classed_topk(acc, starts, lengths, ks)
        if not torch.equal(classed, segmented_topk(acc, starts, lengths, ks)):
            raise SystemExit(f"W = {workers}: classed_topk and segmented_topk selected differently")
        times = [median_ms(lambda f=f: f(acc, starts, lengths, ks), args.repeats, args.device)
                 for f in (classed_topk, segmented_topk)]
        print(f"W={workers:<3} {len(starts):>4} units, {sum(lengths):>10,} elements, k = {sum(ks):>6,}: "
              f"classed {times[0]:7.3f} ms, sorts {times[1]:7.3f} ms (the same {classed.numel():,} indices)", flush=True)


if __name__ == "__main__":
    main()
