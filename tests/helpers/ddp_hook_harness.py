"""Trains a small model with real DDP and sparsebench's comm hook, and saves what happened, so
that tests can replay the same gradients through sparsebench's own step (tests/helpers/stepped_ranks.py).

    torchrun --nproc-per-node=W tests/helpers/ddp_hook_harness.py OUT --methods deft,topk:exchange=sparse_allgather

Per method, each process writes OUT/<spec>.rank<r>.pt: per step its local gradient (computed
beside DDP with torch.autograd.grad on the same batches, summed over the micro-batches of a
`no_sync` accumulation), its selection, its residual after the step, the aggregate DDP left in
`param.grad`, and the hook's stats. Then it saves the hook, model and optimizer state halfway,
trains a fresh DDP model loaded from that checkpoint over the same later batches, and records
whether every aggregate, selection and residual came out the same (`resumed_equal`).

DDP variants (`--variant`): buckets (a tiny bucket_cap_mb: several buckets, rebuilt after the
first iteration), one_bucket (the default cap: one bucket), no_sync (two micro-batches per step,
the first under `ddp.no_sync()`), static_graph, autocast (forward under CPU bfloat16 autocast),
bucket_view (gradient_as_bucket_view=True), unused (find_unused_parameters=True with a branch
that no rank uses at odd steps), nonfinite (rank 1's batch holds a NaN at step NAN_STEP: every
rank's backward must raise, and each records its error instead of the records), seed_per_rank
(seed + rank, as many DDP scripts seed: registering must fail on every rank).
"""
from __future__ import annotations

import argparse
import datetime
import gc
import io
import os
import sys
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist
import yaml
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from experiments.engine.ddp import register_sparsifier  # noqa: E402
from experiments.runformat.errors import ConfigError  # noqa: E402

# Small-model knobs (the papers' defaults assume millions of elements).
SMALL = {"density": 0.05, "exdyna": {"blocks": 32, "block_align": 4}, "sage": {"sample_error": 0.2}}
FEATURES, CLASSES, BATCH = 12, 5, 8
VARIANTS = ("buckets", "one_bucket", "no_sync", "static_graph", "autocast", "bucket_view", "unused", "nonfinite",
            "seed_per_rank")
NAN_STEP, NAN_RANK = 2, 1
DEVICE = torch.device("cpu")  # --device cuda: NCCL, one GPU per process (records come back on the CPU)


class Net(torch.nn.Module):
    """A small MLP; with `branch`, a second head that forward uses only while `use_branch` is set
    (every other step in the `unused` variant): its residual builds up while it is used, so the
    sparsifier still selects its coordinates at the steps no rank uses it."""

    def __init__(self, branch: bool = False) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(), torch.nn.Linear(32, 24), torch.nn.ReLU())
        self.head = torch.nn.Linear(24, CLASSES)
        self.branch = torch.nn.Linear(24, CLASSES) if branch else None
        self.use_branch = branch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.body(x)
        out = self.head(hidden)
        return out + 3.0 * self.branch(hidden) if self.use_branch else out


def parse_spec(spec: str) -> tuple[str, dict]:
    """`topk:exchange=sparse_allgather` -> ("topk", {"density": ..., "exchange": "sparse_allgather"})."""
    name, *pairs = spec.split(":")
    knobs = {"density": SMALL["density"], **SMALL.get(name, {})}
    for pair in pairs:
        key, value = pair.split("=")
        knobs[key] = yaml.safe_load(value)  # as a command line's value: 1 is an int, leader a string
    return name, knobs


def batch(rank: int, step: int, micro: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(10_000 * step + 100 * rank + micro)
    return torch.randn(BATCH, FEATURES, generator=generator), torch.randint(0, CLASSES, (BATCH,), generator=generator)


def loss_of(module: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, autocast: bool) -> torch.Tensor:
    context = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else nullcontext()
    with context:
        out = module(x)
    return torch.nn.functional.cross_entropy(out.float(), y)


def build(name: str, knobs: dict, variant: str, seed: int, reduction: str, init_seed: int | None = None):
    torch.manual_seed(seed if init_seed is None else init_seed)  # the same initial model on every rank
    net = Net(branch=variant == "unused").to(DEVICE)
    options = {"bucket_cap_mb": 0.002 if variant != "one_bucket" else 25}
    if variant == "static_graph":
        options["static_graph"] = True
    if variant == "bucket_view":
        options["gradient_as_bucket_view"] = True
    if variant == "unused":
        options["find_unused_parameters"] = True
    if DEVICE.type == "cuda":
        options["device_ids"] = [DEVICE.index]
    model = DistributedDataParallel(net, **options)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.0 if name == "dgc" else 0.9)
    hook = register_sparsifier(model, name, seed=seed, reduction=reduction, optimizer=optimizer, **knobs)
    hook.start_epoch(0, 100)
    return model, optimizer, hook


def train_step(model, optimizer, hook, rank: int, step: int, variant: str) -> dict:
    """One synchronized step; returns its record."""
    params = [p for p in model.module.parameters() if p.requires_grad]
    micro_batches = 2 if variant == "no_sync" else 1
    autocast = variant == "autocast"
    local = None
    optimizer.zero_grad(set_to_none=True)
    if variant == "unused":
        model.module.use_branch = step % 2 == 0
    for micro in range(micro_batches):
        x, y = (tensor.to(DEVICE) for tensor in batch(rank, step, micro))
        if variant == "nonfinite" and (rank, step) == (NAN_RANK, NAN_STEP):
            x[0, 0] = float("nan")
        # The local gradient, beside DDP (the module itself: no hook runs).
        grads = torch.autograd.grad(loss_of(model.module, x, y, autocast), params, allow_unused=True)
        flat = torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1) for g, p in zip(grads, params)])
        local = flat if local is None else local + flat
        context = model.no_sync() if micro < micro_batches - 1 else nullcontext()
        with context:
            loss_of(model, x, y, autocast).backward()
    aggregate = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
    optimizer.step()
    selection = hook.outcome.selections[0]
    return {
        "gradient": local.cpu(),
        "selection": None if selection is None else torch.sort(selection.long()).values.cpu(),
        "residual": hook.residual.cpu().clone(),
        "aggregate": aggregate.cpu().clone(),
        "stats": dict(hook.stats),
    }


def run(spec: str, variant: str, steps: int, seed: int, reduction: str, out: Path) -> None:
    rank = dist.get_rank()
    name, knobs = parse_spec(spec)
    if variant == "seed_per_rank":  # and then a density per rank
        raised = []
        for mine_seed, mine_knobs in ((seed + rank, knobs), (seed, {**knobs, "density": knobs["density"] * (1 + rank)})):
            try:
                build(name, mine_knobs, variant, mine_seed, reduction)
                raised.append(None)
            except ConfigError as error:
                raised.append(str(error))
        torch.save({"raised": raised}, out / f"{spec}.{variant}.rank{rank}.pt")
        return
    model, optimizer, hook = build(name, knobs, variant, seed, reduction)
    if variant == "nonfinite":
        try:
            for step in range(steps):
                train_step(model, optimizer, hook, rank, step, variant)
            raised = None
        except Exception as error:  # what the user's backward() raises
            raised = {"step": step, "type": type(error).__name__, "message": str(error)}
        torch.save({"raised": raised}, out / f"{spec}.{variant}.rank{rank}.pt")
        return
    half = steps // 2
    records, checkpoint = [], None
    for step in range(steps):
        if step == half:  # a user's checkpoint, through bytes as torch.save writes it to disk
            buffer = io.BytesIO()
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "hook": hook.state_dict()}, buffer)
            checkpoint = buffer.getvalue()
        records.append(train_step(model, optimizer, hook, rank, step, variant))

    model, optimizer, resumed = build(name, knobs, variant, seed, reduction, init_seed=seed + 1)  # another init: the checkpoint must set it
    state = torch.load(io.BytesIO(checkpoint), weights_only=False)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    resumed.load_state_dict(state["hook"])
    equal = resumed.step == half
    for step in range(half, steps):
        again = train_step(model, optimizer, resumed, rank, step, variant)
        for key in ("selection", "residual", "aggregate"):
            a, b = again[key], records[step][key]
            equal = equal and (a is None and b is None or a is not None and b is not None and torch.equal(a, b))
    torch.save({"records": records, "resumed_equal": equal, "name": name, "knobs": knobs, "seed": seed,
                "reduction": reduction, "world_size": dist.get_world_size()},
               out / f"{spec}.{variant}.rank{rank}.pt")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--methods", required=True, help="comma-separated specs: deft,topk:exchange=sparse_allgather")
    parser.add_argument("--variant", default="buckets", help=f"comma-separated, of: {', '.join(VARIANTS)}")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reduction", default="ring")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    global DEVICE
    if args.device == "cuda":
        DEVICE = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(DEVICE)
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo", timeout=datetime.timedelta(seconds=60))
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        for variant in args.variant.split(","):
            for spec in args.methods.split(","):
                run(spec, variant, args.steps, args.seed, args.reduction, args.out)
    finally:
        # DDP models live in reference cycles: collected only now, while the process group still
        # exists. Left to the interpreter's exit, a reducer that had unused parameters is torn
        # down after the group and aborts the process ("terminate called", about 1 exit in 4).
        gc.collect()
        dist.destroy_process_group()
    # Every result is on disk and the group is gone: leave without the interpreter's teardown,
    # where torch's DDP reducer and gloo's threads still aborted a rank now and then ("terminate
    # called without an active exception", exit -6; 67 errors of one suite run, never alone).
    # An exception above propagates before this line and fails the run as it should.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
