"""How many torch operations a `select` dispatches, and how many of them force a host sync, counted
on CPU tensors with the path CUDA takes (issue #36). Both counts are the same on any device: what
is dispatched does not depend on where the data lives, only on the code path, and the code path
is forced to CUDA's (`kernels=torch`, `simulated_gpu()`). On a GPU every dispatched op is a kernel
launch or a few microseconds of host work, and every sync stalls the host until the GPU drains.

A sync is an op that hands data to the host: `.item()` (aten._local_scalar_dense, also what
`int(t)`, `float(t)`, `bool(t)` dispatch), ops whose output size depends on the data (nonzero,
masked_select, unique, boolean indexing, repeat_interleave without output_size), `equal`, and
`.tolist()`/`.numpy()` (no aten op on a CPU tensor: caught at the Python API by a function mode).

    make bench MODE=ops   # = python -m experiments.studies.benchmarks.op_counts [--methods deft,topk] [--workers 1,16]

Beside the counts, the bytes the select's operations hold and the ranked bytes among them (topk,
sort, kthvalue), and what the end-to-end selection model calibrated on the H200 reads from the
three (sparsifiers/common/kernels/selection_model.py; docs/speed.md, "Operations per select").
"""
from __future__ import annotations

import argparse
import copy
from collections import Counter

import torch
from torch.overrides import TorchFunctionMode

from experiments.engine.core.sync_count import SyncCounter
from sparsifiers.common.kernels.backend import current_backend, set_backend, simulated_gpu
from sparsifiers.registry import names

# Python-level calls that copy a tensor to the host without an aten op on CPU tensors.
SYNC_METHODS = {"tolist", "numpy"}


class Counts(SyncCounter):
    """The core's counter (experiments/engine/core/sync_count.py: every aten op, the syncs among them)
    plus the host reads no aten op shows on the CPU (`.tolist()`, `.numpy()`)."""

    @property
    def by_op(self) -> Counter:
        return self.op_names

    @property
    def syncs_by_op(self) -> Counter:
        return self.sync_ops


class _HostReads(TorchFunctionMode):
    def __init__(self, counts: Counts) -> None:
        super().__init__()
        self.counts = counts

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in SYNC_METHODS:
            self.counts.syncs += 1
            self.counts.sync_ops[f"Tensor.{name}"] += 1
        return func(*args, **(kwargs or {}))


class count_ops:
    """Context manager: `with count_ops() as counts: ...` counts what the block dispatches, with
    the kernels' torch path and the GPU's choices forced (see the module docstring); with
    `count_bytes`, the bytes of their tensors too (SyncCounter's)."""

    def __init__(self, count_bytes: bool = False) -> None:
        self.count_bytes = count_bytes

    def __enter__(self) -> Counts:
        self.counts = Counts(count_bytes=self.count_bytes)
        self._backend = current_backend()
        set_backend("torch")
        self._gpu = simulated_gpu()
        self._gpu.__enter__()
        self._function = _HostReads(self.counts)
        self._function.__enter__()
        self.counts.__enter__()
        return self.counts

    def __exit__(self, *exc) -> None:
        self.counts.__exit__(*exc)
        self._function.__exit__(*exc)
        self._gpu.__exit__(*exc)
        set_backend(self._backend)


def count_select(name: str, layout, workers: int, acc: torch.Tensor, density: float = 0.001,
                 settle: int = 4, overrides: tuple[str, ...] = (), count_bytes: bool = False,
                 warm: bool = False) -> tuple[Counts, Counts | None]:
    """Rank 0's select (a follower's, W > 1) of `name` after `settle` steps on `acc`, counted; and
    the leader's plan when the method has one at that step (None otherwise). Like the selection
    benchmark, the settle steps feed back as if every rank selected what rank 0 did. `warm`: as
    in a run's steady state, the counted select's layout was met before (a rank's DEFT bin recurs
    every W steps, after 4 settle steps not yet at W > 4): one uncounted select on a copy first
    fills what is cached per layout (kernels/classed_plan.py)."""
    from experiments.engine.launcher.compose import compose_job
    from experiments.engine.rank.build import build_sparsifier
    from sparsifiers.common.capabilities import leader_of
    from sparsifiers.common.exchange_kinds import Feedback

    cfg = compose_job([f"sparsifier={name}", f"workers={workers}", f"sparsifier.density={density}",
                       "dataset=synthetic", "model=mlp", *overrides])
    with simulated_gpu():
        backend = current_backend()
        set_backend("torch")
        try:
            sparsifier = build_sparsifier(cfg, layout, rank=0)
            step = 0

            def one(count_it: bool = False):
                nonlocal step
                sparsifier.precondition(acc)
                plan_counts = select_counts = None
                leader = leader_of(sparsifier, step)
                if leader is not None and count_it:
                    # A follower's select computes what the leader's plan computed (DEFT's unit
                    # norms): the plan is made on a copy, so rank 0's select pays its own way.
                    planner = sparsifier if leader == 0 else copy.deepcopy(sparsifier)
                    with count_ops() as plan_counts:
                        plan = planner.make_plan(acc, step)
                else:
                    plan = sparsifier.make_plan(acc, step) if leader is not None else None
                if count_it:
                    if warm:
                        copy.deepcopy(sparsifier).select(acc, step, plan)
                    with count_ops(count_bytes) as select_counts:
                        selection = sparsifier.select(acc, step, plan)
                else:
                    selection = sparsifier.select(acc, step, plan)
                count = acc.numel() if selection is None else selection.numel()
                sparsifier.observe(Feedback(step, torch.full((workers,), count, dtype=torch.int64),
                                            min(acc.numel(), count * workers)))
                step += 1
                return select_counts, plan_counts

            for _ in range(settle):
                one()
            while workers > 1 and leader_of(sparsifier, step) == 0:
                step += 1
            return one(count_it=True)
        finally:
            set_backend(backend)


def main() -> None:
    from experiments.studies.benchmarks.resnet18_layout import resnet18_cifar_layout
    from experiments.studies.benchmarks.select import at_operating_point, gradient_like
    from sparsifiers.common.kernels.selection_model import RANKING, SelectCost, calibrated

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default=",".join(names(selects=True)), help="default: every method that selects")
    parser.add_argument("--workers", default="1,16")
    parser.add_argument("--density", type=float, default=0.001)
    parser.add_argument("--repeats", type=int, default=1, help="ignored: counts do not vary (the modes' common option)")
    parser.add_argument("--cold", action="store_true",
                        help="count a rank's first visit to its layout (default: the steady state, count_select's warm)")
    args = parser.parse_args()
    layout = resnet18_cifar_layout()
    acc = at_operating_point(gradient_like(layout.numel), args.density)
    model = calibrated("h200")
    print(f"ops / host syncs per select (torch path, as on CUDA), ResNet-18 layout ({len(layout.segments)} tensors), "
          f"{'a first visit to the layout' if args.cold else 'the layout met before (steady state)'}; "
          f"bytes, ranked bytes and the selection model's ms: {model.describe()}")
    for name in args.methods.split(","):
        for w in (int(x) for x in args.workers.split(",")):
            select, plan = count_select(name, layout, w, acc, args.density, count_bytes=True, warm=not args.cold)
            cost = SelectCost(select.ops, float(select.bytes), float(sum(select.bytes_by_op[op] for op in RANKING)))
            extra = f"   plan: {plan.ops} ops, {plan.syncs} syncs" if plan is not None else ""
            print(f"{name:<12} W={w:<3} select: {select.ops:>5} ops, {select.syncs:>4} syncs, {cost.bytes / 1e6:8.1f} MB, "
                  f"{cost.ranked / 1e6:7.1f} MB ranked, modelled {model.ms(cost):6.3f} ms{extra}")


if __name__ == "__main__":
    main()
