"""Torch's own powerSGD_hook on a tiny DDP model, for tests/test_dense_baselines.py: run under
torchrun with 2 gloo processes; rank 0 saves every step's local gradients (all ranks) and the
aggregate DDP wrote into .grad, in Layout order. The parameters never change (no optimizer
step), so the local gradients come from the data alone.

    python -m torch.distributed.run --nproc-per-node=2 tests/helpers/powersgd_torch_harness.py OUT STEPS START_ITER RANK
"""
from __future__ import annotations

import gc
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

SHAPE = (12, 16)  # Linear(12, 16): a 16 x 12 weight (compressed at rank <= 3) and a bias (whole)


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(*SHAPE), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def batch(step: int, rank: int) -> torch.Tensor:
    return torch.randn(8, SHAPE[0], generator=torch.Generator().manual_seed(1000 * step + rank))


def main(out: str, steps: int, start_iter: int, rank: int) -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    try:
        me = dist.get_rank()
        local_model, ddp = model(), DistributedDataParallel(model())
        state = PowerSGDState(None, matrix_approximation_rank=rank, start_powerSGD_iter=start_iter, random_seed=0)
        ddp.register_comm_hook(state, powerSGD_hook)
        record = []
        for step in range(steps):
            x = batch(step, me)
            local_model.zero_grad()
            local_model(x).square().mean().backward()
            local = torch.cat([p.grad.reshape(-1) for p in local_model.parameters()])
            ddp.zero_grad()
            ddp(x).square().mean().backward()
            aggregate = torch.cat([p.grad.reshape(-1) for p in ddp.module.parameters()])
            everyone = [torch.empty_like(local) for _ in range(dist.get_world_size())]
            dist.all_gather(everyone, local)
            record.append({"local": everyone, "aggregate": aggregate.clone()})
        if me == 0:
            shapes = [(name, tuple(p.shape)) for name, p in local_model.named_parameters()]
            torch.save({"steps": record, "shapes": shapes}, out)
    finally:
        gc.collect()  # the DDP reducer goes while the process group still exists (ddp_hook_harness.py)
        dist.destroy_process_group()
    # As tests/helpers/ddp_hook_harness.py does: the results are on disk and the group is gone, so leave
    # without the interpreter's teardown, where DDP's reducer and gloo's threads can abort a rank
    # ("terminate called without an active exception", exit -6: one suite run here failed so).
    # An exception above propagates before this line and fails the run as it should.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
