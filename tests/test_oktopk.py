"""Ok-Topk (docs/algorithms.md, "oktopk"): its selection, regions and thresholds, and its exchange
(the sparse reduce-scatter and all-gather), against cases worked out by hand from the paper and
the released `AllReducer.run` ('oktopk'), including the released code's edge cases (an empty
region, a rank that selected nothing, a threshold that keeps nothing, a sum that cancels, W = 1);
against the plain replay (tests/helpers/exchange_reference.py) on random inputs at W = 1 to 5; and its
refusal of bad knobs. The whole step (every rank's selection replayed, the collectives, every
logged metric): tests/test_full_step.py; hosted against real processes: tests/test_distributed.py."""
from __future__ import annotations

import types

import numpy as np
import pytest
import torch

from experiments.engine.core.collectives import RankCollectives
from experiments.engine.core.exchange import ExchangeRequest, exchange
from experiments.engine.core.ledger import Collective
from experiments.runformat.errors import ConfigError
from experiments.engine.launcher.compose import preflight
from sparsifiers.common.exchange_kinds import ExchangeKind
from sparsifiers.common.layout import Layout
from sparsifiers.oktopk import OkTopK, proposed_cuts
from tests.helpers.exchange_reference import OkTopkReplay, hosted_exchange


def methods(world_size: int, numel: int, density: float, **knobs) -> list[OkTopK]:
    layout = Layout.from_shapes([("w", (numel,))])
    return [OkTopK(layout, world_size, rank, density=density, warmup_steps=0, **knobs) for rank in range(world_size)]


def exchanged(ranks: list[OkTopK], pairs_by_rank: list[dict[int, float]], step: int, numel: int):
    """Ok-Topk's exchange on ranks whose selections and accumulator values are `pairs_by_rank`."""
    return hosted_exchange(ExchangeKind.SPARSE_REDUCE_SCATTER, pairs_by_rank, numel, methods=ranks, step=step)


# -- selection ------------------------------------------------------------------------------------
def test_the_warm_up_is_dense_and_the_first_sparse_step_takes_the_kth_largest_strictly():
    """warmup_steps = 2: steps 0 and 1 select everything (None) at density 1. Step 2 recomputes:
    k = 3 of |acc| = 8, 5, 5, 4, 1 (at 1, 3, 6, 0, 2): th = 5, and |acc| > 5 strictly keeps only
    position 1. One kept < 0.75 k: the stored th becomes 5 / 1.012 (a Python float, as released)."""
    method = OkTopK(Layout.from_shapes([("w", (10,))]), 1, 0, density=0.3, warmup_steps=2)
    acc = torch.tensor([4.0, -8.0, 1.0, 5.0, 0.0, 0.0, -5.0, 0.0, 0.0, 0.0])
    for step in (0, 1):
        assert method.select(acc, step) is None and method.current_density == 1.0 and method.current_k == 10
    assert method.select(acc, 2).tolist() == [1]
    assert method.current_density == 0.3 and method.current_k == 3
    assert method.metrics()["sparsifier/threshold"] == 5.0
    assert method.local_threshold == 5.0 / 1.012


def test_between_recomputes_the_threshold_climbs_by_3_percent_at_most_five_times():
    """threshold_every = 4. Step 0 recomputes on a first acc (k = 2: th = 9, one kept: th / 1.012).
    Step 1 on 20 elements of |acc| = 10: 20 > floor(3k / 2) = 3 above th, so th x 1.03 up to 5
    times, and still above 10 only after the 4th (9 / 1.012 * 1.03^4 = 10.009...): nothing kept."""
    method = OkTopK(Layout.from_shapes([("w", (20,))]), 1, 0, density=0.1, warmup_steps=0, threshold_every=4)
    first = torch.zeros(20)
    first[:3] = torch.tensor([10.0, 9.0, 1.0])
    assert method.select(first, 0).tolist() == [0]
    th = 9.0 / 1.012
    assert method.local_threshold == th
    for _ in range(4):  # climbs while 20 > 3 exceed it: 8.89 -> 9.16 -> 9.43 -> 9.72 -> 10.01 (stops)
        th = th * 1.03
    assert method.select(torch.full((20,), 10.0), 1).tolist() == []
    assert method.metrics()["sparsifier/threshold"] == th and th > 10.0
    # Nothing kept: the stored threshold comes down by 1.012 for the next step.
    assert method.local_threshold == th / 1.012


def test_the_climb_stops_after_five_raises_however_many_still_exceed():
    method = OkTopK(Layout.from_shapes([("w", (20,))]), 1, 0, density=0.1, warmup_steps=0, threshold_every=4)
    method.select(torch.cat([torch.tensor([2.0, 1.0]), torch.zeros(18)]), 0)  # th = 1, then 1 / 1.012
    th = method.local_threshold
    chosen = method.select(torch.full((20,), 100.0), 1)
    for _ in range(5):
        th = th * 1.03
    assert chosen.numel() == 20 and method.metrics()["sparsifier/threshold"] == th
    assert method.local_threshold == th * 1.012  # 20 > 1.25 k: up for the next step


def test_the_thresholds_are_python_floats_scaled_in_float64_and_rounded_only_at_the_comparison():
    """The released code keeps th_loc and th_glob as Python floats: `ratio2threshold` returns
    float(...item()), the climb does `thres *= 1.03` on a float, the bands `/=` and `*=` floats;
    only `torch.abs(x) > thres` rounds thres to float32. By hand: N = 20, k = 2, one recompute
    (step 0: th = 1, one kept < 0.75 k: th / 1.012), then 32 steps of |acc| = 1e4 everywhere:
    each climbs 5 times (20 > 3 exceed) and keeps 20 > 1.25 k (x 1.012). Then 10 global band
    steps down and 22 up. Scaling in float32 at every step drifts away from these values."""
    method = OkTopK(Layout.from_shapes([("w", (20,))]), 1, 0, density=0.1, warmup_steps=0, threshold_every=100)
    method.select(torch.cat([torch.tensor([2.0, 1.0]), torch.zeros(18)]), 0)
    th, rounded = 1.0 / 1.012, float(np.float32(1.0) / np.float32(1.012))
    for step in range(1, 33):
        assert method.select(torch.full((20,), 1e4), step).numel() == 20
        for _ in range(5):
            th, rounded = th * 1.03, float(np.float32(rounded) * np.float32(1.03))
        th, rounded = th * 1.012, float(np.float32(rounded) * np.float32(1.012))
    assert method.local_threshold == th and th != rounded
    assert abs(th - rounded) > 4 * float(np.spacing(np.float32(th)))  # drifted several float32 ulps apart
    glob = method.global_threshold = 3.0
    for step in range(32):  # 10 steps below 0.75 k gathered, then 22 above 1.25 k
        method.owners_kept(step + 1, 0 if step < 10 else 3, None)
        glob = glob / 1.01 if step < 10 else glob * 1.008
    assert method.global_threshold == glob
    assert OkTopK.load_state_dict(method, method.state_dict()) is None and method.local_threshold == th  # exact resume
    # Rounded only at the comparison: a stored th just below the float32 x rounds up to x, so
    # |acc| = x is not selected (x > th in float64, not x > float32(th)).
    x = float(np.float32(1.5))
    method.local_threshold = x - 2.0 ** -40
    assert method.select(torch.tensor([x] + [0.0] * 19), 33).tolist() == []
    method.local_threshold = x - float(np.spacing(np.float32(x)))  # one float32 ulp below: selected
    assert method.select(torch.tensor([x] + [0.0] * 19), 34).tolist() == [0]


# -- regions --------------------------------------------------------------------------------------
def test_each_rank_proposes_every_cth_selected_position_and_the_regions_are_the_floored_mean():
    """W = 3: S = 1, 4, 6, 9, 12, 15 gives c = 2 and (S[2], S[4]) = (6, 12); S = 0, 2, 3, 20, 21,
    22, 23 c = 2: (3, 21); a rank with 2 selected (c = 0) proposes S[0] twice; a rank with none
    the even split (N = 30: 10, 20; the released code fails there). B = floor(sum / W)."""
    assert proposed_cuts(torch.tensor([1, 4, 6, 9, 12, 15]), 3, 30).tolist() == [6, 12]
    assert proposed_cuts(torch.tensor([0, 2, 3, 20, 21, 22, 23]), 3, 30).tolist() == [3, 21]
    assert proposed_cuts(torch.tensor([7, 8]), 3, 30).tolist() == [7, 7]
    assert proposed_cuts(torch.tensor([], dtype=torch.int64), 3, 30).tolist() == [10, 20]
    ranks = methods(3, 30, 0.1)
    ranks[0].set_regions(torch.tensor([6 + 3 + 7, 12 + 21 + 7]))
    assert ranks[0].region_boundaries.tolist() == [0, 5, 13, 30]  # floor(16 / 3), floor(40 / 3)


def test_the_schedule_counts_from_the_end_of_the_warm_up():
    method = OkTopK(Layout.from_shapes([("w", (100,))]), 2, 0, density=0.1, warmup_steps=128,
                    threshold_every=32, regions_every=64)
    assert [t for t in range(300) if method.recomputes(t)] == [128, 160, 192, 224, 256, 288]  # t % 32 == 0, t >= 128
    assert [t for t in range(300) if method.regions_due(t)] == [128, 192, 256]  # as released: t % 64 == 0


# -- the exchange, by hand ------------------------------------------------------------------------
def test_two_ranks_recompute_step_by_hand():
    """N = 8, W = 2, k = 2 (d = 0.25), a recompute and repartition step. Rank 0 selected
    {1: 3, 2: -1, 5: 2, 6: 1}, rank 1 {2: 1, 5: 4, 7: -6}. Proposals: rank 0 S[1 * 2] = 5, rank 1
    S[1 * 1] = 5: B = (0, 5, 8). Counts: rank 0 sends 2 pairs to each region, rank 1 1 and 2.
    Owner 0 sums {1: 3, 2: -1 + 1 = 0}; owner 1 (itself first, then rank 0) {5: 4 + 2 = 6, 6: 1,
    7: -6}. Recompute: every non-zero sum is sent (the cancelled 2 is not): {1: 3} and {5: 6, 6: 1,
    7: -6}; every rank keeps the k = 2 largest, 5 and 7 (|6| = |-6|, ahead of 3 and 1),
    th_glob = 6. agg = sums / 2. Residuals: rank 0 zeroes 5 (its 3 at 1 was sent to its
    owner but dropped: it stays), rank 1 zeroes 5 and 7."""
    ranks = methods(2, 8, 0.25)
    out, result, meter = exchanged(ranks, [{1: 3.0, 2: -1.0, 5: 2.0, 6: 1.0}, {2: 1.0, 5: 4.0, 7: -6.0}], 0, 8)
    assert ranks[0].region_boundaries.tolist() == ranks[1].region_boundaries.tolist() == [0, 5, 8]
    assert out.tolist() == [0, 0, 0, 0, 0, 3.0, 0, -3.0]
    assert result.counts.tolist() == [4, 3] and result.aggregated == 2
    assert [z.tolist() for z in result.zeroed] == [[5], [5, 7]]
    assert ranks[0].global_threshold == ranks[1].global_threshold == 6.0
    assert meter.collectives == [
        Collective("all_reduce", 1, 8),  # the proposals (int64)
        Collective("all_to_all", 1, 4),  # the pair counts
        Collective("shift_round", 2, 8, 1, sizes=(2, 1)),  # rank 0 -> 1: 2 pairs, rank 1 -> 0: 1
        Collective("all_gather", 1, 4),  # the owners' counts
        Collective("all_gather_v", 3, 8, sizes=(1, 3)),
    ]
    # In order: the ring all-reduce of 8 bytes (2 (W - 1) / W of it), one int32 to the other
    # rank, the pairs, one int32, and the ring all-gatherv (rank r forwards every block but
    # its successor's: rank 0 its own 1 pair, rank 1 its own 3).
    assert meter.sent.tolist() == [8 + 4 + 2 * 8 + 4 + 1 * 8, 8 + 4 + 1 * 8 + 4 + 3 * 8]


def test_between_recomputes_the_owners_send_what_passes_the_global_threshold_and_it_follows_the_band():
    """The same ranks on a later step (not a recompute, not a repartition: B = (0, 5, 8) stays).
    th_glob = 2.5: owner 0 keeps |3| > 2.5 at 1; owner 1 keeps 6 at 5 and -6 at 7 (1 at 6 is
    below). Everything gathered is the aggregate: 3 > 1.25 k = 2.5 pairs, so th_glob x 1.008."""
    ranks = methods(2, 8, 0.25, threshold_every=2, regions_every=2)
    exchanged(ranks, [{1: 3.0, 2: -1.0, 5: 2.0, 6: 1.0}, {2: 1.0, 5: 4.0, 7: -6.0}], 0, 8)
    for method in ranks:
        method.global_threshold = 2.5
    out, result, meter = exchanged(ranks, [{1: 3.0, 2: -1.0, 5: 2.0, 6: 1.0}, {2: 1.0, 5: 4.0, 7: -6.0}], 1, 8)
    assert out.tolist() == [0, 1.5, 0, 0, 0, 3.0, 0, -3.0]
    assert result.aggregated == 3 and [z.tolist() for z in result.zeroed] == [[1, 5], [5, 7]]
    assert ranks[0].global_threshold == 2.5 * 1.008
    assert [c.op for c in meter.collectives] == ["all_to_all", "shift_round", "all_gather", "all_gather_v"]
    # Below 0.75 k gathered: down by 1.01. A threshold that keeps nothing: an empty aggregate.
    for method in ranks:
        method.global_threshold = 100.0
    out, result, _ = exchanged(ranks, [{1: 3.0}, {7: -6.0}], 1, 8)
    assert result.aggregated == 0 and not out.any() and [z.tolist() for z in result.zeroed] == [[], []]
    assert ranks[1].global_threshold == 100.0 / 1.01


def test_empty_regions_a_rank_that_selected_nothing_and_an_empty_gather():
    """W = 3, N = 9, a repartition and recompute step. Rank 0 selected nothing (proposes 3, 6),
    ranks 1 and 2 only position 8 (c = 0: propose 8, 8). B = (0, floor(19/3), floor(22/3), 9) =
    (0, 6, 7, 9): region 1 holds nothing. Then a step where every sum cancels: nothing is
    gathered, the aggregate is empty and th_glob keeps its value (the released code fails)."""
    ranks = methods(3, 9, 0.25)
    out, result, meter = exchanged(ranks, [{}, {8: 1.0}, {8: 2.0}], 0, 9)
    assert ranks[0].region_boundaries.tolist() == [0, 6, 7, 9]
    assert out.tolist() == [0] * 8 + [1.0]  # (1 + 2) / 3
    assert result.counts.tolist() == [0, 1, 1] and ranks[2].global_threshold == 3.0
    # Only rank 1 sends (its 8 to owner 2, at shift 1); rank 2's own pair stays home.
    assert [c.sizes for c in meter.collectives if c.op == "shift_round"] == [(0, 1, 0), (0, 0, 0)]
    out, result, _ = exchanged(ranks, [{}, {8: 1.0}, {8: -1.0}], 0, 9)
    assert result.aggregated == 0 and not out.any() and ranks[0].global_threshold == 3.0


def test_a_recompute_steps_residual_is_looked_up_in_the_top_k_by_magnitude_as_released():
    """The released `intersect1d_searchsorted(S_r, top-k)` binary-searches S_r's positions in the
    top-k as `torch.topk` orders it, by magnitude. W = 1, N = 10, k = 3, S = 1, 3, 4, 8 with
    values 4, -1, 3, -5: the top 3 are 8, 1, 4 in that order. numpy's search (left side, the
    bounds carried from one ascending key to the next): 1 -> slot 0 (8 is not 1: missed); 3 ->
    slot 2 (4: no); 4 -> slot 2 (found); 8 -> slot 3, past the end, pointed at 0 (found). So
    the residual keeps the applied 4 at position 1 (applied again later). recompute_residual=
    intersection zeroes 1, 4 and 8; a step that reuses the thresholds gathers in index order
    and finds every match either way."""
    pairs = [{1: 4.0, 3: -1.0, 4: 3.0, 8: -5.0}]
    for knob, expected in (("released", [4, 8]), ("intersection", [1, 4, 8])):
        ranks = methods(1, 10, 0.3, recompute_residual=knob, threshold_every=2)
        out, result, _ = exchanged(ranks, pairs, 0, 10)
        assert out.tolist() == [0, 4.0, 0, 0, 3.0, 0, 0, 0, -5.0, 0] and [z.tolist() for z in result.zeroed] == [expected]
        assert ranks[0].describe()["recompute_residual"] == knob
        ranks[0].global_threshold = 2.0
        out, result, _ = exchanged(ranks, pairs, 1, 10)  # not a recompute step: |sum| > 2 in index order
        assert [z.tolist() for z in result.zeroed] == [[1, 4, 8]]


def test_the_papers_variant_keeps_exactly_k_and_balances_before_the_all_gather_by_hand():
    """variant=paper, W = 2, N = 8, k = 2, a repartition step. Rank 0 sends {1: 3, 2: 5}, rank 1
    {2: 1, 7: -1}: proposals 2 and 7, B = (0, 4, 8). Owner 0 sums {1: 3, 2: 6}, owner 1 {7: -1}.
    The 2 largest |sum| of all regions: 6 and 3 (t = 3: one above, one at t, both owner 0's);
    the probes of the search are all-reduces of one int64 count. G = 2 kept, balanced to 1 a
    rank: owner 0's second pair (2: 6) goes to rank 1 (one shift round), then the all-gatherv of
    blocks (1, 1). agg = {1: 1.5, 2: 3}; the residual is the intersection; th_glob = t."""
    ranks = methods(2, 8, 0.25, variant="paper")
    out, result, meter = exchanged(ranks, [{1: 3.0, 2: 5.0}, {2: 1.0, 7: -1.0}], 0, 8)
    assert ranks[0].region_boundaries.tolist() == [0, 4, 8]
    assert out.tolist() == [0, 1.5, 3.0, 0, 0, 0, 0, 0] and result.aggregated == 2
    assert [z.tolist() for z in result.zeroed] == [[1, 2], [2]]
    assert ranks[0].global_threshold == ranks[1].global_threshold == 3.0 and ranks[0].describe()["variant"] == "paper"
    ops = meter.collectives
    probes = ops[3:-4]
    assert ops[:3] == [Collective("all_reduce", 1, 8), Collective("all_to_all", 1, 4),
                       Collective("shift_round", 1, 8, 1, sizes=(0, 1))]
    assert 1 <= len(probes) <= 32 and set(probes) == {Collective("all_reduce", 1, 8)}
    assert ops[-4:] == [Collective("all_gather", 2, 8),  # each owner's counts above and at t
                        Collective("all_gather", 1, 4),  # the owners' counts
                        Collective("shift_round", 1, 8, 1, sizes=(1, 0)),  # the balancing: rank 0 -> 1
                        Collective("all_gather_v", 1, 8, sizes=(1, 1))]


def test_the_papers_variant_selects_exactly_k_and_keeps_exactly_k_with_ties_to_the_lower_index():
    """Local: the k largest |acc| every step, no threshold reused (k = 2 of 3, 5, 5, 1: 1 and 2).
    Owners: W = 3, every sum of magnitude 1 at positions 0, 4, 8 (owner 0 holds 0, owner 2 holds 4
    and 8) and k = 2: exactly 2 kept, the lower indices 0 and 4 (owner 2 keeps one of its two
    ties); fewer non-zero sums than k: all of them."""
    method = methods(1, 10, 0.2, variant="paper")[0]
    acc = torch.tensor([3.0, 5.0, -5.0, 1.0] + [0.0] * 6)
    assert method.select(acc, 0).tolist() == [1, 2] and method.select(acc, 1).tolist() == [1, 2]
    ranks = methods(3, 9, 0.25, variant="paper")  # k = 2
    out, result, _ = exchanged(ranks, [{0: 1.0}, {4: 1.0}, {8: -1.0}], 0, 9)
    assert ranks[0].region_boundaries.tolist() == [0, 4, 4, 9] and result.aggregated == 2  # proposals 0, 4, 8 twice
    assert out.nonzero().view(-1).tolist() == [0, 4]
    out, result, _ = exchanged(ranks, [{0: 1.0}, {}, {}], 1, 9)
    assert out.nonzero().view(-1).tolist() == [0] and result.aggregated == 1


def test_one_worker_owns_everything_and_sends_nothing():
    """W = 1 (the released code fails: no boundaries to propose): one region, the whole vector;
    k = 3 of the 3 gathered are kept; every collective moves 0 bytes."""
    ranks = methods(1, 6, 0.5)
    out, result, meter = exchanged(ranks, [{0: 1.0, 3: -2.0, 4: 0.5}], 0, 6)
    assert ranks[0].region_boundaries.tolist() == [0, 6]
    assert out.tolist() == [1.0, 0, 0, -2.0, 0.5, 0] and result.aggregated == 3
    assert meter.sent.tolist() == [0.0] and meter.recv.tolist() == [0.0]


# -- the exchange against the replay, on random inputs --------------------------------------------
@pytest.mark.parametrize("residual, variant", [("released", "released"), ("intersection", "released"), ("released", "paper")])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
def test_the_exchange_is_the_replay_on_random_selections(world_size, residual, variant):
    """Four steps (threshold_every = 2, regions_every = 3: a recompute and repartition, a kept
    threshold, a recompute, a repartition on a kept threshold) of random accumulators with
    repeated magnitudes and random selections of different sizes, hosted, against the replay.
    variant=paper: the owners' exact top-k with its ties at the k-th magnitude (to the lower
    index), fewer than k non-zero sums at times, and the balancing's rounds."""
    generator = torch.Generator().manual_seed(world_size)
    numel, density = 50, 0.1
    ranks = methods(world_size, numel, density, threshold_every=2, regions_every=3, recompute_residual=residual, variant=variant)
    replay = OkTopkReplay(f"oktopk:density={density}:warmup_steps=0:threshold_every=2:regions_every=3:"
                          f"recompute_residual={residual}:variant={variant}", numel, world_size)
    for step in range(4):
        accs = [torch.randint(-4, 5, (numel,), generator=generator).float() / 4 for _ in range(world_size)]
        selections = [torch.sort(torch.randperm(numel, generator=generator)[:int(torch.randint(0, 12, (1,), generator=generator))]).values
                      for _ in range(world_size)]
        comm = RankCollectives(world_size, list(range(world_size)), use_process_group=False)
        out = torch.empty(numel)
        request = ExchangeRequest(selections, accs, out, comm, methods=ranks, step=step)
        result = exchange(ExchangeKind.SPARSE_REDUCE_SCATTER, request)
        expected, issued = replay.exchange(types.SimpleNamespace(step=step, accs=accs, selections=selections))
        assert torch.equal(out.double(), expected.aggregate), step
        assert result.aggregated == expected.union and result.counts.tolist() == expected.counts
        assert [torch.isin(torch.arange(numel), z).tolist() for z in result.zeroed] == [z.tolist() for z in expected.zeroed]
        assert comm.meter.collectives == issued
        assert ranks[0].global_threshold == float(replay.glob) and ranks[0].region_boundaries.tolist() == replay.bounds


# -- refusal --------------------------------------------------------------------------------------
def test_a_bad_variant_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match="sparsifier.variant='intended': one of released, paper"):
        OkTopK(Layout.from_shapes([("w", (10,))]), 2, 0, density=0.2, variant="intended")


def test_a_bad_residual_lookup_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match="sparsifier.recompute_residual='exact': one of released, intersection"):
        OkTopK(Layout.from_shapes([("w", (10,))]), 2, 0, density=0.2, recompute_residual="exact")


@pytest.mark.parametrize("knob, value", [("warmup_steps", -1), ("threshold_every", 0), ("regions_every", 2.5)])
def test_bad_knobs_are_refused_naming_the_key(knob, value):
    with pytest.raises(ConfigError, match=f"sparsifier.{knob}={value}: an integer >= "):
        OkTopK(Layout.from_shapes([("w", (10,))]), 2, 0, density=0.2, **{knob: value})
    # Before launch: the preset's type (an int) answers a float first, the method the range.
    with pytest.raises(ConfigError, match=f"^sparsifier.{knob}(={value}: an integer >= | must be an integer, got {value})"):
        preflight(["sparsifier=oktopk", f"sparsifier.{knob}={value}", "workers=2", "dataset=digits", "model=mlp"])
