"""Exchange semantics against plain references, error-feedback conservation through the real
training step, and traffic accounting against sizes computed by hand."""
from __future__ import annotations

import pytest
import torch

from experiments.engine.core.collectives import RankCollectives
from experiments.engine.launcher.compose import compose_job
from experiments.engine.core.exchange import ExchangeRequest, allreduce_at, exchange
from experiments.engine.core.metrics import MetricContext, exchange_metrics
from experiments.engine.core.step import train_step
from experiments.engine.rank.train import build_session
from experiments.engine.core.ledger import Collective
from experiments.engine.core.traffic import TrafficMeter, binomial_children
from experiments.engine.core.world import World
from experiments.engine.rank.build import build_sparsifier
from sparsifiers.common.base import SelectionScope
from sparsifiers.common.exchange_kinds import ExchangeKind
from sparsifiers.common.layout import Layout
from tests.helpers.stepped_ranks import SteppedRanks

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
    result = exchange(ExchangeKind.UNION_ALLREDUCE, ExchangeRequest(selections, accs, out, hosted_comm()))
    expected, union = reference_union(selections, accs)
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-7)
    assert result.aggregated == len(union)
    assert result.counts.tolist() == [s.numel() for s in selections]
    assert all(sorted(z.tolist()) == union for z in result.zeroed)  # every rank zeroes all of U


# -- shared indices: added to U by every rank, never exchanged (DEFT's common units) -----------
def disjoint_case(seed: int, world_size: int):
    """Accumulators, disjoint selections and shared ranges (disjoint from them) over N."""
    generator = torch.Generator().manual_seed(seed)
    accs = [torch.randn(N, generator=generator) for _ in range(world_size)]
    order = torch.randperm(N - 8, generator=generator)
    shared = torch.cat([torch.arange(N - 8, N - 5), torch.arange(N - 3, N)])  # two units, 6 elements
    cuts = sorted(torch.randint(0, 24, (world_size - 1,), generator=generator).tolist())
    bounds = [0, *cuts, 24]
    selections = [order[a:b] for a, b in zip(bounds, bounds[1:])]  # 24 of the rest, some maybe empty
    return accs, selections, shared


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("seed", range(4))
def test_union_allreduce_with_shared_indices_matches_reference(world_size, seed):
    accs, selections, shared = disjoint_case(seed, world_size)
    out = torch.empty(N)
    comm = hosted_comm(world_size)
    result = exchange(ExchangeKind.UNION_ALLREDUCE, ExchangeRequest(selections, accs, out, comm, shared=shared))
    # Reference: U = union of the selections and the shared indices; agg[U] = mean over ranks.
    union = sorted(set().union(*(set(s.tolist()) for s in selections), shared.tolist()))
    expected = torch.zeros(N)
    for i in union:
        expected[i] = sum(float(acc[i]) for acc in accs) / world_size
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-7)
    assert result.aggregated == len(union) == 24 + 6 and result.shared == 6
    assert result.counts.tolist() == [s.numel() for s in selections]  # |S_r| excludes the shared
    assert all(sorted(z.tolist()) == union for z in result.zeroed)  # every rank zeroes all of U
    # Traffic: counts header, indices padded to the largest count (no shared index), values of all U.
    sent = (world_size - 1) * 4 * (1 + max(s.numel() for s in selections)) + 2 * (world_size - 1) / world_size * 30 * 4
    assert comm.meter.sent.tolist() == pytest.approx([sent] * world_size, rel=1e-12)
    # Build-up counts what the selections brought: 1 for disjoint selections; density all of U.
    context = MetricContext(N, 30, 0.75, SelectionScope.SPLIT, world_size, 1.0)
    row = exchange_metrics(result, comm.meter, context)
    assert row["buildup"] == 1.0 and row["density/actual"] == 30 / N and row["density/error"] == 0.0


def test_traffic_of_union_allreduce_with_shared_indices_by_hand():
    """W=4, counts 3,5,2,4 and 10 shared (|U| = 24): per rank, counts header 3*1*4 = 12 B, indices
    padded to 5 (none shared): 3*5*4 = 60 B, values 2*3/4*24*4 = 144 B -> 216 B. W=2, counts 3,5
    and 6 shared (|U| = 14): 1*1*4 = 4 B, 1*5*4 = 20 B, 2*1/2*14*4 = 56 B -> 80 B."""
    selections = [torch.arange(0, 3), torch.arange(3, 8), torch.arange(8, 10), torch.arange(10, 14)]
    shared = torch.cat([torch.arange(20, 26), torch.arange(36, 40)])
    comm = hosted_comm()
    out = torch.empty(N)
    accs = [torch.randn(N) for _ in range(W)]
    result = exchange(ExchangeKind.UNION_ALLREDUCE, ExchangeRequest(selections, accs, out, comm, shared=shared))
    assert comm.meter.sent.tolist() == [216.0] * 4 and comm.meter.recv.tolist() == [216.0] * 4
    assert (result.aggregated, result.shared, result.counts.tolist()) == (24, 10, [3, 5, 2, 4])
    assert torch.count_nonzero(out[14:20]) == 0 and torch.count_nonzero(out[26:36]) == 0

    comm = hosted_comm(2)
    result = exchange(ExchangeKind.UNION_ALLREDUCE,
                      ExchangeRequest(selections[:2], accs[:2], out, comm, shared=shared[:6]))
    assert comm.meter.sent.tolist() == [80.0] * 2 and (result.aggregated, result.shared) == (14, 6)


def test_only_union_allreduce_takes_shared_indices():
    accs, selections = random_case(0)
    for kind in (ExchangeKind.SPARSE_ALLGATHER, ExchangeKind.DENSE):
        with pytest.raises(ValueError, match="shared indices are aggregated by union_allreduce only"):
            exchange(kind, ExchangeRequest(selections, accs, torch.empty(N), hosted_comm(), shared=torch.tensor([1, 2])))


def test_union_allreduce_when_every_coordinate_is_shared():
    """Nobody selected anything (every DEFT unit common): no index allgather, U is the shared set."""
    accs, _ = random_case(2)
    comm = hosted_comm()
    out = torch.empty(N)
    shared = torch.arange(N)
    result = exchange(ExchangeKind.UNION_ALLREDUCE,
                      ExchangeRequest([torch.empty(0, dtype=torch.int64)] * W, accs, out, comm, shared=shared))
    torch.testing.assert_close(out, torch.stack(accs).mean(0))
    assert (result.aggregated, result.shared, result.counts.tolist()) == (N, N, [0] * W)
    assert comm.meter.sent.tolist() == [3 * 4 + 2 * 3 / 4 * N * 4] * W  # counts header and values only


@pytest.mark.parametrize("seed", range(5))
def test_sparse_allgather_matches_reference(seed):
    accs, selections = random_case(seed)
    out = torch.empty(N)
    result = exchange(ExchangeKind.SPARSE_ALLGATHER, ExchangeRequest(selections, accs, out, hosted_comm()))
    torch.testing.assert_close(out, reference_sparse_allgather(selections, accs), rtol=1e-6, atol=1e-7)
    assert [sorted(z.tolist()) for z in result.zeroed] == [sorted(s.tolist()) for s in selections]
    assert result.aggregated == len(reference_union(selections, accs)[1])


def test_dense_is_the_mean():
    accs, _ = random_case(0)
    out = torch.empty(N)
    result = exchange(ExchangeKind.DENSE, ExchangeRequest([None] * W, accs, out, hosted_comm()))
    torch.testing.assert_close(out, torch.stack(accs).mean(0))
    assert result.aggregated == N and result.zeroed == [None] * W


@pytest.mark.parametrize("kind, counts", [
    (ExchangeKind.LEADER_BROADCAST, [0, 0, 3, 0]),  # only the leader (rank 2) selected
    (ExchangeKind.SHARED_ALLREDUCE, [3, 3, 3, 3]),  # every rank "selected" the shared set
])
def test_leader_and_shared_allreduce_send_one_index_set(kind, counts):
    """No index traffic here (the leader's indices travelled in the plan's broadcast): the 3
    values' ring all-reduce only, 2*3/4*3*4 = 18 B sent and received per rank."""
    accs, _ = random_case(1)
    shared = torch.tensor([3, 7, 11])
    comm = hosted_comm()
    out = torch.empty(N)
    result = exchange(kind, ExchangeRequest([shared] * W, accs, out, comm, leader=2))
    expected = torch.zeros(N)
    expected[shared] = torch.stack([a[shared] for a in accs]).mean(0)
    torch.testing.assert_close(out, expected)
    assert result.aggregated == 3 and result.shared == 0
    assert result.counts.tolist() == counts
    assert all(z.tolist() == [3, 7, 11] for z in result.zeroed)
    assert comm.meter.sent.tolist() == [18.0] * W and comm.meter.recv.tolist() == [18.0] * W


@pytest.mark.parametrize("reduction, sent", [("ring", 18.0), ("rank_order", 36.0)])
def test_allreduce_at_an_index_set_by_hand(reduction, sent):
    """The helper the union, leader and shared exchanges end in, alone. acc_r[i] = (r + 1) i,
    so the mean over W = 4 ranks at i is 2.5 i exactly; 3 float32 values are allreduced:
    ring 2*3/4*3*4 = 18 B per rank, rank_order an all-gather, 3*3*4 = 36 B."""
    accs = [torch.arange(N, dtype=torch.float32) * (r + 1) for r in range(W)]
    before = [acc.clone() for acc in accs]
    indices = torch.tensor([9, 0, 5])  # distinct, not sorted: U need only be the same everywhere
    counts = torch.tensor([2, 0, 1, 0])
    comm = RankCollectives(W, list(range(W)), use_process_group=False, reduction=reduction)
    out = torch.full((N,), float("nan"))  # every coordinate outside U must be written too
    result = allreduce_at(indices, accs, out, comm, counts, shared=1)
    expected = torch.zeros(N)
    expected[[9, 0, 5]] = torch.tensor([22.5, 0.0, 12.5])
    assert torch.equal(out, expected)
    assert result.counts is counts and result.aggregated == 3 and result.shared == 1
    assert all(zeroed is indices for zeroed in result.zeroed) and len(result.zeroed) == W
    assert all(torch.equal(acc, old) for acc, old in zip(accs, before))  # residuals are the step's to zero
    assert comm.meter.sent.tolist() == [sent] * W and comm.meter.recv.tolist() == [sent] * W


def hosted_world(workers: int) -> World:
    return World(workers, 1, 0, list(range(workers)), torch.device("cpu"), hosted_comm(workers))


@pytest.mark.parametrize("spec", ["topk", "topk:sparse_allgather", "dense"])
def test_error_feedback_conserves_every_coordinate(spec):
    """acc_r == transmitted_r + new residual_r, exactly, on every rank and step, where what was
    transmitted comes from the selections select returned, not from the exchange's own report:
    the union of every rank's selection (union_allreduce), the rank's own (sparse_allgather), all
    of acc (dense). The exchange must report exactly that set as zeroed."""
    method, *exchange_kind = spec.split(":")
    overrides = [f"sparsifier={method}", "workers=4", "dataset=synthetic", "model=mlp", "model.hidden=16", "batch_size=8"]
    overrides += [f"sparsifier.exchange={kind}" for kind in exchange_kind]
    world = hosted_world(4)
    session = build_session(compose_job(overrides), world)
    seen: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for rank, sparsifier in zip(world.local_ranks, session.ranks.sparsifiers):  # record acc as select sees it, and what it selected
        original = sparsifier.select

        def spy(acc, step, plan=None, _original=original, _rank=rank):
            selection = _original(acc, step, plan)
            seen[_rank] = (acc.clone(), torch.empty(0, dtype=torch.int64) if selection is None else selection.clone())
            return selection

        sparsifier.select = spy
    batches = [iter(r.batches.epoch(0)) for r in session.replicas]
    for step in range(5):
        outcome = train_step(session.ranks, session.model, session.task, session.optimizer,
                             session.replicas, [next(b) for b in batches], step, measure_norms=False)
        union = sorted(set().union(*(set(selection.tolist()) for _, selection in seen.values())))
        for rank, residual, zeroed in zip(world.local_ranks, session.ranks.residuals, outcome.result.zeroed):
            acc, own = seen[rank]
            if method == "dense":
                expected = list(range(acc.numel()))
                assert zeroed is None
            else:
                expected = union if not exchange_kind else sorted(own.tolist())
                assert sorted(zeroed.tolist()) == expected, (step, rank)
            transmitted = torch.zeros_like(acc)
            transmitted[expected] = acc[expected]
            assert torch.equal(transmitted + residual, acc)
            assert torch.count_nonzero(transmitted) > 0
        if method != "dense":  # the two exchanges differ: the union is more than a rank's own
            assert len(union) > max(seen[r][1].numel() for r in seen)


def test_traffic_of_union_allreduce_by_hand():
    """W=4, counts 3,5,2,4 (disjoint, |U| = 14): per rank, int32 counts header 3*1*4 = 12 B,
    indices padded to 5: 3*5*4 = 60 B, values allreduce 2*3/4*14*4 = 84 B -> 156 B sent."""
    selections = [torch.arange(0, 3), torch.arange(3, 8), torch.arange(8, 10), torch.arange(10, 14)]
    accs = [torch.randn(N) for _ in range(W)]
    comm = hosted_comm()
    exchange(ExchangeKind.UNION_ALLREDUCE, ExchangeRequest(selections, accs, torch.empty(N), comm))
    assert comm.meter.sent.tolist() == [156.0] * 4 and comm.meter.recv.tolist() == [156.0] * 4

    comm = hosted_comm()  # (index, value) pairs: 12 + 60 indices + 60 values
    exchange(ExchangeKind.SPARSE_ALLGATHER, ExchangeRequest(selections, accs, torch.empty(N), comm))
    assert comm.meter.sent.tolist() == [132.0] * 4

    comm = hosted_comm()  # dense: 2*3/4*40*4 = 240
    exchange(ExchangeKind.DENSE, ExchangeRequest([None] * W, accs, torch.empty(N), comm))
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


# Per-rank bytes sent (= received) for W = 2, 3, 4, worked out by hand. Rank r selects
# [2r, 3r + 1): counts 1, 2, 3, 4 (ranks 2 and 3 overlap at 6), |U| = 3, 6, 9; N = 40 float32
# values, int32 indices and counts. Union: counts header (W-1)*4 + indices padded to the largest
# count (W-1)*max*4 + ring all-reduce of U's values 2(W-1)/W*|U|*4, e.g. W = 3: 8 + 24 + 32.
# Sparse all-gather: header + indices + values all-gathered padded, (W-1)*max*4 each. Dense:
# 2(W-1)/W*40*4. Leader and shared ([3, 7, 11] everywhere): the values' all-reduce, 2(W-1)/W*3*4.
BY_HAND = {
    ExchangeKind.UNION_ALLREDUCE: {2: 24.0, 3: 64.0, 4: 114.0},
    ExchangeKind.SPARSE_ALLGATHER: {2: 20.0, 3: 56.0, 4: 108.0},
    ExchangeKind.DENSE: {2: 160.0, 3: 640.0 / 3, 4: 240.0},
    ExchangeKind.LEADER_BROADCAST: {2: 12.0, 3: 16.0, 4: 18.0},
    ExchangeKind.SHARED_ALLREDUCE: {2: 12.0, 3: 16.0, 4: 18.0},
}


@pytest.mark.parametrize("world_size", [2, 3, 4])
@pytest.mark.parametrize("kind", list(BY_HAND))
def test_traffic_of_every_exchange_kind_by_hand(kind, world_size):
    generator = torch.Generator().manual_seed(world_size)
    accs = [torch.randn(N, generator=generator) for _ in range(world_size)]
    if kind in (ExchangeKind.LEADER_BROADCAST, ExchangeKind.SHARED_ALLREDUCE):
        selections = [torch.tensor([3, 7, 11])] * world_size
    elif kind is ExchangeKind.DENSE:
        selections = [None] * world_size
    else:
        selections = [torch.arange(2 * r, 3 * r + 1) for r in range(world_size)]
    comm = hosted_comm(world_size)
    exchange(kind, ExchangeRequest(selections, accs, torch.empty(N), comm, leader=world_size - 1))
    expected = BY_HAND[kind][world_size]
    assert comm.meter.sent.tolist() == pytest.approx([expected] * world_size, rel=1e-12)
    assert comm.meter.recv.tolist() == pytest.approx([expected] * world_size, rel=1e-12)


@pytest.mark.parametrize("world_size, sent", [
    # A plan of 5 int32 from rank 1: an int64 length header (8 B), then 20 B, over each tree edge.
    (2, [0.0, 28.0]),            # rank 1 sends to rank 0
    (3, [0.0, 56.0, 0.0]),       # the root feeds both others
    (4, [0.0, 56.0, 28.0, 0.0]),  # root -> relative 1 (rank 2) and 2 (rank 3); rank 2 -> rank 0
])
def test_the_plan_broadcast_counts_its_size_header(world_size, sent):
    comm = hosted_comm(world_size)
    received = comm.broadcast(torch.arange(5), 1, torch.int32, torch.device("cpu"))
    assert received.tolist() == [0, 1, 2, 3, 4]
    assert comm.meter.sent.tolist() == sent
    assert comm.meter.recv.tolist() == [0.0 if rank == 1 else 28.0 for rank in range(world_size)]


@pytest.mark.parametrize("world_size, sent", [(2, 24.0), (3, 32.0), (4, 36.0)])
def test_the_averaged_inputs_allreduce_by_hand(world_size, sent):
    """DEFT's norms=global: 6 float32 unit norms per rank, ring all-reduced: 2(W-1)/W*6*4 B."""
    comm = hosted_comm(world_size)
    total = comm.sum_over_ranks([torch.full((6,), float(r)) for r in range(world_size)])
    assert total.tolist() == [float(sum(range(world_size)))] * 6
    assert comm.meter.sent.tolist() == pytest.approx([sent] * world_size)


@pytest.mark.parametrize("scope, buildup", [(SelectionScope.WHOLE, 4.0), (SelectionScope.SPLIT, 1.0)])
def test_one_steps_metrics_by_hand(scope, buildup):
    """W = 4 disjoint selections of 3, 5, 2 and 4 (|U| = 14) of N = 40, k = floor(0.35 * 40) = 14:
    density 14/40 = 0.35 and error 14/14 - 1 = 0; build-up |U| / mean |S_r| = 14 / 3.5 = 4 when
    every rank selects for the whole vector, |U| / sum |S_r| = 1 when the work is split; overlap
    sum |S_r| / |U| = 1; load imbalance W max / sum - 1 = 20/14 - 1 (the padding the index
    all-gather pays); 156 B sent (by hand above) of the dense all-reduce's 2*3/4*40*4 = 240 B."""
    selections = [torch.arange(0, 3), torch.arange(3, 8), torch.arange(8, 10), torch.arange(10, 14)]
    comm = hosted_comm()
    result = exchange(ExchangeKind.UNION_ALLREDUCE,
                      ExchangeRequest(selections, [torch.randn(N) for _ in range(W)], torch.empty(N), comm))
    context = MetricContext(N, 14, 0.35, scope, W, 240.0)
    metrics = exchange_metrics(result, comm.meter, context)
    assert metrics["density/actual"] == 0.35 and metrics["density/target"] == 0.35 and metrics["density/error"] == 0.0
    assert metrics["buildup"] == buildup and metrics["selection/overlap"] == 1.0
    assert metrics["selection/k_max"] == 5.0 and metrics["selection/k_mean"] == 3.5
    assert metrics["selection/load_imbalance"] == pytest.approx(20 / 14 - 1, rel=1e-15)
    assert metrics["traffic/sent_bytes_max"] == 156.0 and metrics["traffic/ratio"] == pytest.approx(156 / 240, rel=1e-15)
    # DGC's warm-up: the error is measured against the step's own target, k = 7 at density 0.175.
    warm = exchange_metrics(result, comm.meter, context, k_now=7, density_now=0.175)
    assert warm["density/error"] == 1.0 and warm["density/target"] == 0.175


# -- the size header: sent only when the counts vary with the data ------------------------------
# Top-k's W = 4 ranks select k = 3 each of N = 40, disjoint (|U| = 12). With the header, per rank:
# the counts all-gather (W-1)*1*4 = 12 B, the indices padded to 3: (W-1)*3*4 = 36 B, then the
# values: union_allreduce's all-reduce 2(W-1)/W*12*4 = 72 B (120 B), sparse_allgather's
# all-gather (W-1)*3*4 = 36 B (84 B). With the counts known to every rank: 12 B less, one
# collective less, and the same aggregate, counts and zeroed coordinates bit for bit.
KNOWN_K = 3
KNOWN_SELECTIONS = [torch.arange(KNOWN_K * r, KNOWN_K * (r + 1)) for r in range(W)]
HEADER = Collective("all_gather", 1, 4)
BY_HAND_HEADER = {
    ExchangeKind.UNION_ALLREDUCE: ([HEADER, Collective("all_gather", 3, 4), Collective("all_reduce", 12, 4)], 120.0),
    ExchangeKind.SPARSE_ALLGATHER: ([HEADER, Collective("all_gather", 3, 4), Collective("all_gather", 3, 4)], 84.0),
}


@pytest.mark.parametrize("kind", list(BY_HAND_HEADER))
def test_known_counts_drop_the_size_header_and_nothing_else(kind):
    accs = [torch.randn(N, generator=torch.Generator().manual_seed(r)) for r in range(W)]
    ledger, sent = BY_HAND_HEADER[kind]
    with_header, without = hosted_comm(), hosted_comm()
    out_with, out_without = torch.empty(N), torch.empty(N)
    before = exchange(kind, ExchangeRequest(KNOWN_SELECTIONS, accs, out_with, with_header))
    after = exchange(kind, ExchangeRequest(KNOWN_SELECTIONS, accs, out_without, without, counts=[KNOWN_K] * W))
    assert with_header.meter.collectives == ledger and with_header.meter.sent.tolist() == [sent] * W
    assert without.meter.collectives == ledger[1:] and without.meter.sent.tolist() == [sent - 12.0] * W
    assert without.meter.recv.tolist() == [sent - 12.0] * W
    assert torch.equal(out_with, out_without)
    assert torch.equal(before.counts, after.counts) and before.counts.dtype == after.counts.dtype == torch.int64
    assert (before.aggregated, before.shared) == (after.aggregated, after.shared)
    assert all(torch.equal(a, b) for a, b in zip(before.zeroed, after.zeroed))


def test_a_selection_that_is_not_its_announced_count_is_refused():
    accs = [torch.randn(N) for _ in range(W)]
    selections = [*KNOWN_SELECTIONS[:3], torch.arange(30, 34)]  # rank 3 selected 4, announced 3
    for kind in BY_HAND_HEADER:
        with pytest.raises(ValueError, match="rank 3 selected 4 coordinates, but its count was announced as 3"):
            exchange(kind, ExchangeRequest(selections, accs, torch.empty(N), hosted_comm(), counts=[KNOWN_K] * W))
    with pytest.raises(ValueError, match="known counts name 3 ranks, the world has 4"):
        exchange(ExchangeKind.UNION_ALLREDUCE,
                 ExchangeRequest(KNOWN_SELECTIONS, accs, torch.empty(N), hosted_comm(), counts=[3] * 3))
    # The exchanges that send no header take no counts.
    with pytest.raises(ValueError, match="leader_broadcast sends none"):
        exchange(ExchangeKind.LEADER_BROADCAST,
                 ExchangeRequest(KNOWN_SELECTIONS, accs, torch.empty(N), hosted_comm(), leader=0, counts=[KNOWN_K] * W))


def stepped(method: str, density: float, **knobs) -> SteppedRanks:
    layout = Layout.from_shapes([("weight", (30,)), ("bias", (10,))])  # N = 40
    cfg = compose_job([f"sparsifier={method}", f"workers={W}", f"sparsifier.density={density}", "dataset=synthetic",
                       "model=mlp", *(f"sparsifier.{key}={value}" for key, value in knobs.items())])
    return SteppedRanks([build_sparsifier(cfg, layout, rank=rank) for rank in range(W)])


def noise(step: int) -> list[torch.Tensor]:
    return [torch.randn(N, generator=torch.Generator().manual_seed(100 * step + r)) for r in range(W)]


@pytest.mark.parametrize("exchange_kind", ["union_allreduce", "sparse_allgather"])
def test_a_topk_step_sends_no_size_header(exchange_kind):
    """Top-k, k = floor(0.075 * 40) = 3 on every rank: the indices padded to 3, then the values
    (the union's |U| as it came out): no counts all-gather, (W-1)*3*4 = 36 B of indices."""
    world = stepped("topk", 0.075, exchange=exchange_kind)
    for step in range(3):
        got = world.step(noise(step), step)
        union = got.aggregated
        assert got.counts == [KNOWN_K] * W
        if exchange_kind == "union_allreduce":
            assert world.comm.meter.collectives == [Collective("all_gather", 3, 4), Collective("all_reduce", union, 4)]
            assert world.comm.meter.sent.tolist() == pytest.approx([36 + 2 * 3 / 4 * union * 4] * W, rel=1e-12)
        else:
            assert world.comm.meter.collectives == [Collective("all_gather", 3, 4)] * 2
            assert world.comm.meter.sent.tolist() == [72.0] * W


def test_a_cltk_plan_travels_without_its_size_header():
    """CLT-k, k = 3: the leader's 3 int32 indices alone (no int64 length before them), over the
    binomial tree from the leader t mod 4, then the values' all-reduce 2(W-1)/W*3*4 = 18 B. Step
    1 (leader rank 1): rank 1 sends to relative ranks 1 and 2 (ranks 2 and 3), rank 2 to rank 0."""
    world = stepped("cltk", 0.075)
    world.step(noise(0), 0)
    got = world.step(noise(1), 1)
    assert got.leader == 1 and got.plan.numel() == KNOWN_K
    assert world.comm.meter.collectives == [Collective("broadcast", 3, 4, 1), Collective("all_reduce", 3, 4)]
    assert world.comm.meter.sent.tolist() == [18.0, 2 * 12 + 18.0, 12 + 18.0, 18.0]


def test_a_broadcast_of_another_length_than_announced_is_refused():
    with pytest.raises(ValueError, match=r"rank 1 broadcasts a tensor of shape \(4,\), but every rank expects \(3,\)"):
        hosted_comm().broadcast(torch.arange(4), 1, torch.int32, torch.device("cpu"), (3,))


@pytest.mark.parametrize("norms, header", [("local", True), ("global", False)])
def test_a_deft_step_sends_the_size_header_only_with_local_norms(norms, header):
    """DEFT at W = 4 on [30, 10] (units: 30 cut in 4 pieces of 8, 8, 7, 7, and the bias: 5):
    the plan is always W + 1 + 5 = 10 int32, sent alone. norms=local: each rank's k_l are its
    own, so the counts all-gather stays; norms=global (the 5 norms all-reduced first): every
    rank knows every count from the shared k_l and the plan, and it goes."""
    world = stepped("deft", 0.1, norms=norms)  # k = 4
    for step in range(3):
        got = world.step(noise(step), step)
        averaged = [] if header else [Collective("all_reduce", 5, 4)]
        counts = [HEADER] if header else []
        indices = [Collective("all_gather", max(got.counts), 4)] if max(got.counts) else []
        assert world.comm.meter.collectives == [*averaged, Collective("broadcast", 10, 4, step % W), *counts, *indices,
                                                Collective("all_reduce", got.aggregated, 4)]


@pytest.mark.parametrize("method, knobs", [("micro", {}), ("threshold", {}), ("exdyna", {"blocks": 8})])
def test_a_thresholded_step_still_sends_the_size_header(method, knobs):
    """Counts that follow a threshold vary with each rank's data, and no collective before the
    exchange carries them: the counts all-gather (W-1)*4 = 12 B comes first."""
    world = stepped(method, 0.1, **knobs)
    for step in range(3):
        got = world.step(noise(step), step)
        collectives = world.comm.meter.collectives
        assert collectives[0] == HEADER and collectives[1] == Collective("all_gather", max(got.counts), 4)
        assert world.sparsifiers[0].known_counts(step) is None
