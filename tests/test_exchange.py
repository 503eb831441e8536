"""Exchange semantics against plain references, error-feedback conservation through the real
training step, and traffic accounting against sizes computed by hand."""
from __future__ import annotations

import pytest
import torch

from experiments.collectives import RankCollectives
from experiments.compose import compose_job
from experiments.exchange import exchange
from experiments.step import train_step
from experiments.train import build_session
from experiments.traffic import TrafficMeter, binomial_children
from experiments.world import World
from sparsifiers.base import ExchangeKind

W, N = 4, 40


def hosted_comm(world_size: int = W) -> RankCollectives:
    return RankCollectives(world_size, list(range(world_size)), use_process_group=False)


def random_case(seed: int):
    generator = torch.Generator().manual_seed(seed)
    accs = [torch.randn(N, generator=generator) for _ in range(W)]
    selections = [torch.randperm(N, generator=generator)[: 3 + 2 * r] for r in range(W)]
    return accs, selections


def reference_union(selections, accs):
    union = sorted(set().union(*(set(s.tolist()) for s in selections)))
    agg = torch.zeros(N)
    for i in union:
        agg[i] = sum(float(acc[i]) for acc in accs) / W
    return agg, union


def reference_sparse_allgather(selections, accs):
    agg = torch.zeros(N)
    for selection, acc in zip(selections, accs):
        for i in selection.tolist():
            agg[i] += float(acc[i]) / W
    return agg


@pytest.mark.parametrize("seed", range(5))
def test_union_allreduce_matches_reference(seed):
    accs, selections = random_case(seed)
    out = torch.empty(N)
    result = exchange(ExchangeKind.UNION_ALLREDUCE, selections, accs, out, hosted_comm())
    expected, union = reference_union(selections, accs)
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-7)
    assert result.aggregated == len(union)
    assert result.counts.tolist() == [s.numel() for s in selections]
    assert all(sorted(z.tolist()) == union for z in result.zeroed)  # every rank zeroes all of U


@pytest.mark.parametrize("seed", range(5))
def test_sparse_allgather_matches_reference(seed):
    accs, selections = random_case(seed)
    out = torch.empty(N)
    result = exchange(ExchangeKind.SPARSE_ALLGATHER, selections, accs, out, hosted_comm())
    torch.testing.assert_close(out, reference_sparse_allgather(selections, accs), rtol=1e-6, atol=1e-7)
    assert [sorted(z.tolist()) for z in result.zeroed] == [sorted(s.tolist()) for s in selections]
    assert result.aggregated == len(reference_union(selections, accs)[1])


def test_dense_is_the_mean():
    accs, _ = random_case(0)
    out = torch.empty(N)
    result = exchange(ExchangeKind.DENSE, [None] * W, accs, out, hosted_comm())
    torch.testing.assert_close(out, torch.stack(accs).mean(0))
    assert result.aggregated == N and result.zeroed == [None] * W


def test_leader_and_shared_allreduce_send_one_index_set():
    accs, _ = random_case(1)
    shared = torch.tensor([3, 7, 11])
    for kind in (ExchangeKind.LEADER_BROADCAST, ExchangeKind.SHARED_ALLREDUCE):
        out = torch.empty(N)
        result = exchange(kind, [shared] * W, accs, out, hosted_comm(), leader=2)
        expected = torch.zeros(N)
        expected[shared] = torch.stack([a[shared] for a in accs]).mean(0)
        torch.testing.assert_close(out, expected)
        assert result.aggregated == 3
    assert result.counts.tolist() == [3, 3, 3, 3]  # shared: every rank "selected" the set


def hosted_world(workers: int) -> World:
    return World(workers, 1, 0, list(range(workers)), torch.device("cpu"), hosted_comm(workers))


@pytest.mark.parametrize("spec", ["topk", "topk:sparse_allgather", "dense"])
def test_error_feedback_conserves_every_coordinate(spec):
    """acc_r == transmitted_r + new residual_r, exactly, on every rank and step."""
    method, *exchange_kind = spec.split(":")
    overrides = [f"sparsifier={method}", "workers=4", "dataset=synthetic", "model=mlp", "model.hidden=16", "batch_size=8"]
    overrides += [f"sparsifier.exchange={kind}" for kind in exchange_kind]
    world = hosted_world(4)
    session = build_session(compose_job(overrides), world)
    seen: dict[int, torch.Tensor] = {}
    for replica in session.replicas:  # record acc as select sees it
        original = replica.sparsifier.select

        def spy(acc, step, plan=None, _original=original, _rank=replica.rank):
            seen[_rank] = acc.clone()
            return _original(acc, step, plan)

        replica.sparsifier.select = spy
    batches = [iter(r.batches.epoch(0)) for r in session.replicas]
    for step in range(5):
        outcome = train_step(world, session.model, session.loss_fn, session.flat, session.optimizer,
                             session.replicas, [next(b) for b in batches], step, measure_norms=False)
        for replica, zeroed in zip(session.replicas, outcome.result.zeroed):
            acc = seen[replica.rank]
            transmitted = torch.zeros_like(acc)
            if zeroed is None:
                transmitted = acc
            else:
                transmitted[zeroed] = acc[zeroed]
            assert torch.equal(transmitted + replica.residual, acc)
            assert torch.count_nonzero(transmitted) > 0


def test_traffic_of_union_allreduce_by_hand():
    """W=4, counts 3,5,2,4 (disjoint, |U| = 14): per rank, int32 counts header 3*1*4 = 12 B,
    indices padded to 5: 3*5*4 = 60 B, values allreduce 2*3/4*14*4 = 84 B -> 156 B sent."""
    selections = [torch.arange(0, 3), torch.arange(3, 8), torch.arange(8, 10), torch.arange(10, 14)]
    accs = [torch.randn(N) for _ in range(W)]
    comm = hosted_comm()
    exchange(ExchangeKind.UNION_ALLREDUCE, selections, accs, torch.empty(N), comm)
    assert comm.meter.sent.tolist() == [156.0] * 4 and comm.meter.recv.tolist() == [156.0] * 4

    comm = hosted_comm()  # (index, value) pairs: 12 + 60 indices + 60 values
    exchange(ExchangeKind.SPARSE_ALLGATHER, selections, accs, torch.empty(N), comm)
    assert comm.meter.sent.tolist() == [132.0] * 4

    comm = hosted_comm()  # dense: 2*3/4*40*4 = 240
    exchange(ExchangeKind.DENSE, [None] * W, accs, torch.empty(N), comm)
    assert comm.meter.sent.tolist() == [240.0] * 4


def test_binomial_broadcast_by_hand():
    """W=4, root 1: relative ranks 0..3 -> the root sends to 2 children, relative 1 to one;
    everyone but the root receives once."""
    assert [binomial_children(v, 4) for v in range(4)] == [2, 1, 0, 0]
    assert [binomial_children(v, 5) for v in range(5)] == [3, 1, 0, 0, 0]
    meter = TrafficMeter(4)
    meter.broadcast(10, 4, root=1)
    assert meter.sent.tolist() == [0.0, 80.0, 40.0, 0.0]  # rank 1 root, rank 2 = relative 1
    assert meter.recv.tolist() == [40.0, 0.0, 40.0, 40.0]
    assert meter.sent.sum() == meter.recv.sum()
