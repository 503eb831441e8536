"""CUDA paths that a CPU cannot run, made visible on it (issue 45 item 5): where a broadcast's
payload lives, and how many times a hosted step drains the GPU's queue. The CUDA path is forced
on CPU tensors: a fake `torch.cuda.Event` and a `torch.cuda.synchronize` that only counts.
"""
from __future__ import annotations

import pytest
import torch

from experiments.engine.core import stopwatch
from experiments.engine.core.collectives import RankCollectives
from experiments.engine.core.sparsify import sparsify_and_exchange
from experiments.engine.core.sync_count import CUDA_SYNCHRONIZE, SyncCounter
from experiments.engine.core.world import World, init_world
from experiments.studies.benchmarks.step import benchmark_layout, build_method, gaussian_gradient

NUMEL = 20_000


def test_a_broadcast_payload_built_on_the_cpu_goes_to_the_groups_device():
    """DEFT's and Accordion's plans are built on the CPU; NCCL sends only tensors on the
    group's device ('No backend type associated with device type cpu'). The meta device
    stands in for CUDA: the root's payload must land on the device the caller names."""
    comm = RankCollectives(2, [0, 1], use_process_group=False)
    plan = torch.arange(6, dtype=torch.int64)  # on the CPU, like encode_plan's
    sent = comm.broadcast(plan, 0, torch.int32, torch.device("meta"), (6,))
    assert sent.device.type == "meta" and sent.dtype == torch.int32


class FakeEvent:
    """torch.cuda.Event on a CPU: records the host clock; readable only after a synchronize."""

    clock = 0.0

    def __init__(self, enable_timing: bool = False) -> None:
        self.at = None

    def record(self) -> None:
        FakeEvent.clock += 1.0  # 1 ms between consecutive marks: the intervals are exact
        self.at = FakeEvent.clock

    def elapsed_time(self, end: "FakeEvent") -> float:
        assert SYNCED["done"], "an event read before the step synchronized"
        return end.at - self.at


SYNCED = {"done": False}


@pytest.fixture
def forced_cuda(monkeypatch):
    """The CUDA timing path on CPU tensors: events, and a world whose synchronize is CUDA's."""
    SYNCED["done"] = False
    monkeypatch.setattr(stopwatch, "uses_events", lambda device: True)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: SYNCED.update(done=True))
    monkeypatch.setattr(World, "synchronize", lambda self: torch.cuda.synchronize(self.device))


@pytest.mark.parametrize("method", ["topk", "deft", "exdyna"])
@pytest.mark.parametrize("workers", [4, 16])
def test_a_hosted_step_synchronizes_once_whatever_w(forced_cuda, method, workers):
    world = init_world(workers, "cpu", "gloo", 60)
    layout = benchmark_layout(NUMEL)
    sparsifiers = [build_method(method, workers, 0.01, layout, rank) for rank in range(workers)]
    accs = [gaussian_gradient(NUMEL, 1e-2, rank, 0) for rank in range(workers)]
    out = torch.zeros(NUMEL)
    sparsify_and_exchange(world, sparsifiers, accs, out, 0)
    SYNCED["done"] = False
    with SyncCounter() as counter:
        outcome = sparsify_and_exchange(world, sparsifiers, accs, out, 1)
    assert counter.sync_ops[CUDA_SYNCHRONIZE] == 1, counter.sync_ops
    # every rank's select is its own interval of events (1 ms apart in the fake), the leader's
    # plan added to its own
    plan_ms = 1.0 if outcome.leader is not None else 0.0
    assert [ms - (plan_ms if rank == outcome.leader else 0.0) for rank, ms in enumerate(outcome.select_ms)] == [1.0] * workers
    assert outcome.exchange_ms == 1.0


def test_the_sync_counter_counts_torch_cuda_synchronize(monkeypatch):
    """It is no aten operation: dispatch never sees it, so it is counted by name."""
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    with SyncCounter() as counter:
        torch.cuda.synchronize()
        torch.ones(3).sum()
    assert counter.sync_ops[CUDA_SYNCHRONIZE] == 1 and counter.syncs == 1
    torch.cuda.synchronize()  # put back on leaving: no longer counted
    assert counter.syncs == 1
