"""One rank of a user's small DDP script with sparsebench's hook, in torch's pattern (a state
object and a hook function), for tests/test_ddp_wheel.py: run from an installed wheel (no
clone, no conf/) and from the clone, it must train the same two steps.

    python -I ddp_wheel_script.py RANK WORLD_SIZE STORE OUT

Hydra is blocked before anything is imported: the hook must not need it. Rank 0 writes OUT (JSON):
a hash of the trained parameters, the hook's stats, where sparsebench was imported from, and
which of the clone-only modules got imported.
"""
from __future__ import annotations

import datetime
import gc
import hashlib
import importlib.abc
import json
import os
import sys
from pathlib import Path


class RefuseHydra(importlib.abc.MetaPathFinder):
    """Any import of hydra fails: the hook's run-time path must not reach it."""

    def find_spec(self, name, path, target=None):
        if name == "hydra" or name.startswith("hydra."):
            raise ImportError(f"{name} was imported: the DDP hook must run without Hydra")
        return None


sys.meta_path.insert(0, RefuseHydra())

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

STEPS = 2
CLONE_ONLY = ("hydra", "experiments.engine.launcher", "experiments.engine.rank", "experiments.engine.ddp.config_node")


def train(rank: int) -> dict:
    from experiments.engine.ddp import SparsifierState, sparsifier_hook

    torch.manual_seed(0)  # the same initial model on every rank
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model = DistributedDataParallel(net)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    # kernels="torch": no numba compilation in a fresh install (the compiled kernels give the same results)
    state = SparsifierState(model, "deft", density=0.1, kernels="torch", optimizer=optimizer)
    model.register_comm_hook(state, sparsifier_hook)
    generator = torch.Generator().manual_seed(100 + rank)  # every rank its own batches
    for _ in range(STEPS):
        x, y = torch.randn(16, 8, generator=generator), torch.randint(0, 4, (16,), generator=generator)
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in net.parameters())).hexdigest()
    import experiments
    import sparsifiers

    return {
        "parameters_sha256": digest,
        "hook_steps": state.step,
        "stats": state.stats,
        "residual_sha256": hashlib.sha256(state.residual.numpy().tobytes()).hexdigest(),
        "sparsifiers_file": str(Path(sparsifiers.__file__).resolve()),
        "experiments_file": str(Path(experiments.__file__).resolve()),
        "imported_clone_only": sorted(m for m in sys.modules if m.startswith(CLONE_ONLY)),
    }


def main() -> None:
    rank, world_size, store, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=60))
    try:
        result = train(rank)
    finally:
        gc.collect()  # DDP lives in reference cycles: collected while the group still exists
        dist.destroy_process_group()
    if rank == 0:
        out.write_text(json.dumps(result))
    # Everything is written and the group is gone: leave without the interpreter's teardown, where
    # torch's DDP reducer and gloo's threads can abort a process now and then (tests/helpers/ddp_hook_harness.py).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
