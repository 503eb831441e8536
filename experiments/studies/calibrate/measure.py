"""Timing real collectives: W processes on this host, one process group, every rank timed.

Each of W processes (one torch thread each; on GPUs one GPU each) runs, for every collective and
size: `warmup` untimed calls, then `repeats` timed ones. Before each call a barrier lines the ranks
up; a call's time on a rank is from leaving the barrier to the collective's end (on a GPU: after a
device synchronize). A repeat's time is the MAX over ranks (a collective is done when its last
rank is), the sample is the MEDIAN over repeats (robust to a descheduled process on a busy host).

Sizes are bytes of the collective's whole tensor: all_reduce and broadcast of n bytes, all_gather
whose output is n bytes (n / W from every rank), in float32 elements (at least one per rank).
"""
from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

OPS = ("all_reduce", "all_gather", "broadcast")
ELEMENT_BYTES = 4  # float32


@dataclass(frozen=True)
class Sample:
    """One measured point: the median over repeats of the max over ranks, in seconds."""

    op: str
    world_size: int
    nbytes: int  # the whole tensor (all_gather: its output)
    seconds: float
    repeats: int


def elements_of(op: str, nbytes: int, world_size: int) -> int:
    """float32 elements per rank's input: the whole tensor, or for all_gather one W-th of it."""
    elements = max(1, nbytes // ELEMENT_BYTES)
    return max(1, elements // world_size) if op == "all_gather" else elements


def actual_bytes(op: str, nbytes: int, world_size: int) -> int:
    """The bytes really moved for a requested size (elements round down, at least one)."""
    per_rank = elements_of(op, nbytes, world_size) * ELEMENT_BYTES
    return per_rank * world_size if op == "all_gather" else per_rank


def _call(op: str, tensor: torch.Tensor, outputs: list[torch.Tensor]) -> None:
    if op == "all_reduce":
        dist.all_reduce(tensor)
    elif op == "all_gather":
        dist.all_gather(outputs, tensor)
    else:
        dist.broadcast(tensor, src=0)


def _worker(rank: int, world_size: int, store: str, plan: dict, out: str) -> None:
    """One rank: times every (op, size) of the plan; rank 0 writes the samples to `out`."""
    torch.set_num_threads(1)  # W processes share the host's cores: one thread each
    use_cuda = plan["backend"] == "nccl"
    device = torch.device("cuda", rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(plan["backend"], init_method=f"file://{store}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=plan["timeout_s"]))
    try:
        samples = []
        for op in plan["ops"]:
            for nbytes in plan["sizes"]:
                elements = elements_of(op, nbytes, world_size)
                tensor = torch.ones(elements, device=device)
                outputs = [torch.empty_like(tensor) for _ in range(world_size)] if op == "all_gather" else []
                times = []
                repeats = plan["repeats"]
                for i in range(plan["warmup"] + repeats):
                    dist.barrier()
                    started = time.perf_counter()
                    _call(op, tensor, outputs)
                    if use_cuda:
                        torch.cuda.synchronize(device)
                    elapsed = time.perf_counter() - started
                    if i >= plan["warmup"]:
                        times.append(elapsed)
                    if i == plan["warmup"]:  # the first timed call decides how many fit the budget
                        first = torch.tensor([elapsed], dtype=torch.float64, device=device)
                        dist.all_reduce(first, op=dist.ReduceOp.MAX)  # every rank the same count
                        repeats = max(min(plan["min_repeats"], plan["repeats"]),
                                      min(plan["repeats"], int(plan["budget_s"] / max(first.item(), 1e-9))))
                mine = torch.tensor(times, dtype=torch.float64, device=device)
                gathered = [torch.empty_like(mine) for _ in range(world_size)]
                dist.all_gather(gathered, mine)
                slowest = torch.stack(gathered).max(dim=0).values  # per repeat: the last rank done
                samples.append(Sample(op, world_size, actual_bytes(op, nbytes, world_size),
                                      statistics.median(slowest.tolist()), len(times)))
                del tensor, outputs
        if rank == 0:
            Path(out).write_text(json.dumps([asdict(s) for s in samples]))
    finally:
        dist.destroy_process_group()


def measure(world_size: int, sizes: list[int], repeats: int, *, warmup: int = 2, min_repeats: int = 3,
            budget_s: float = 0.5, backend: str = "gloo", ops: tuple[str, ...] = OPS,
            timeout_s: float = 120.0) -> list[Sample]:
    """Starts `world_size` processes on this host and returns their samples (op, size order).
    `budget_s`: about how long the timed repeats of one point may take (at least `min_repeats`)."""
    plan = dict(sizes=sizes, repeats=repeats, warmup=warmup, min_repeats=min_repeats, budget_s=budget_s,
                backend=backend, ops=list(ops), timeout_s=timeout_s)
    with tempfile.TemporaryDirectory(prefix="calibrate-") as tmp:
        store, out = os.path.join(tmp, "store"), os.path.join(tmp, "samples.json")
        mp.spawn(_worker, args=(world_size, store, plan, out), nprocs=world_size, join=True)
        return [Sample(**row) for row in json.loads(Path(out).read_text())]
