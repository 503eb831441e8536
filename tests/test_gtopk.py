"""gTop-k (docs/algorithms.md, "gtopk"): the tree merge against cases worked out by hand from the
paper and the released `gtopk_sparse_allreduce` / `add_residuals`, against the plain reference
(tests/helpers/exchange_reference.py) on random inputs with ties, and its refusal of a W that is not a
power of 2. Hosted against real processes: tests/test_distributed.py (every method)."""
from __future__ import annotations

import pytest
import torch

from experiments.engine.core.collectives import RankCollectives
from experiments.engine.core.exchange import ExchangeRequest, exchange
from experiments.runformat.errors import ConfigError
from experiments.engine.launcher.compose import preflight
from sparsifiers.common.exchange_kinds import ExchangeKind
from sparsifiers.gtopk import GTopK
from sparsifiers.common.layout import Layout
from tests.helpers.exchange_reference import gtopk_tree, hosted_exchange


def merged(pairs_by_rank: list[dict[int, float]], numel: int = 8):
    """The tree on ranks whose selections and accumulator values are `pairs_by_rank`."""
    return hosted_exchange(ExchangeKind.TREE_MERGE, pairs_by_rank, numel)


def test_four_ranks_by_hand_sums_duplicates_keeps_k_and_breaks_ties_by_index():
    """k = 2. Round 1: rank 0 takes rank 1's {1: 2, 2: -3}: {0: 4, 1: 1 + 2 = 3, 2: -3}, keeps 0 and
    1 (|3| ties with |-3|: the lower index); rank 2 takes rank 3's: {3: 1, 4: -1 - 2 = -3, 5: 0.5},
    keeps 4 and 3. Round 2: {0: 4, 1: 3, 3: 1, 4: -3}: keeps 0 and 1 (1 before 4 on the tie).
    agg = sums / 4. Residuals: rank 0 zeroes 0 and 1, rank 1 only 1 (its -3 at 2 was dropped and
    stays), ranks 2 and 3 nothing."""
    out, result, meter = merged([{0: 4.0, 1: 1.0}, {1: 2.0, 2: -3.0}, {3: 1.0, 4: -1.0}, {4: -2.0, 5: 0.5}])
    assert out.tolist() == [1.0, 0.75, 0, 0, 0, 0, 0, 0]
    assert [z.tolist() for z in result.zeroed] == [[0, 1], [1], [], []]
    assert result.counts.tolist() == [2, 2, 2, 2] and result.aggregated == 2
    # One message of k (int32 index, float32 value) pairs per round, then rank 0's pairs broadcast
    # alone: every rank knows k, so no size header goes anywhere.
    assert [(c.op, c.elements, c.element_bytes, c.root) for c in meter.collectives] == [
        ("tree_round", 2, 8, 1), ("tree_round", 2, 8, 2), ("broadcast", 2, 8, 0)]
    # Every sender sends its 16 bytes once; rank 0 receives 16 per round; the broadcast on top
    # (binomial tree from 0: rank 0 forwards to 1 and 2, rank 1 to 3; each receives 16 bytes).
    tree_sent, tree_recv = [0, 16, 16, 16], [32, 0, 16, 0]
    broadcast_sent, broadcast_recv = [32, 16, 0, 0], [0, 16, 16, 16]
    assert meter.sent.tolist() == [t + b for t, b in zip(tree_sent, broadcast_sent)]
    assert meter.recv.tolist() == [t + b for t, b in zip(tree_recv, broadcast_recv)]


def test_a_value_dropped_in_a_subtree_is_lost_when_its_index_survives_elsewhere():
    """The released residual rule (and the paper's): k = 1. Rank 2's 1.0 at index 0 loses to
    rank 3's 3.0 in round 1, but index 0 reaches the final list through rank 0 (5 beats 2, then
    3). The aggregate is rank 0's 5 alone, / 4, and rank 2 zeroes index 0 all the same."""
    out, result, _ = merged([{0: 5.0}, {1: 2.0}, {0: 1.0}, {2: 3.0}])
    assert out.tolist() == [1.25, 0, 0, 0, 0, 0, 0, 0]
    assert [z.tolist() for z in result.zeroed] == [[0], [], [0], []]


def test_one_rank_sends_nothing_and_keeps_its_own_top_k():
    out, result, meter = merged([{3: -2.0, 5: 1.0}])
    assert out.tolist() == [0, 0, 0, -2.0, 0, 1.0, 0, 0]
    assert [z.tolist() for z in result.zeroed] == [[3, 5]]
    assert [c.op for c in meter.collectives] == ["broadcast"] and meter.sent.tolist() == [0.0]


HALF_ULP = 2.0 ** -24  # half of float32's ulp at 1.0: 1 + HALF_ULP rounds to 1.0 (ties to even)


def zeros_at(*indices: int) -> dict[int, float]:
    """A rank whose k selected values are all 0 (it only passes its partner's list on)."""
    return {index: 0.0 for index in indices}


def test_eight_ranks_keep_float64_after_the_first_merge_and_choose_their_k_on_it():
    """The released merge precision, by hand (k = 1; `gtopk_sparse_allreduce` in numpy: a
    receiver's own float32 values are added to in place at its first merge, then concatenated
    with the float64 receive buffer, so its list is float64 from then on). Round 1 (first
    merges, float32): rank 0 {1: 1}, rank 2 {1: 2^-24}, rank 4 {0: 1}, rank 6 {7: 0.5}. Round 2:
    rank 0 adds in float64: {1: 1 + 2^-24}; rank 4 keeps {0: 1} over 0.5. Round 3: rank 0 holds
    1 + 2^-24 at index 1 against rank 4's 1 at index 0 and keeps index 1, the larger in float64;
    its final value is rounded to float32, 1.0. Rounding every merge to float32 would tie 1 with
    1 there and keep index 0 (the lower): another coordinate, other residuals."""
    ranks = [{1: 1.0}, zeros_at(5), {1: HALF_ULP}, zeros_at(5), {0: 1.0}, zeros_at(5), {7: 0.5}, zeros_at(5)]
    out, result, _ = merged(ranks)
    assert out.tolist() == [0, 1 / 8, 0, 0, 0, 0, 0, 0]
    assert [z.tolist() for z in result.zeroed] == [[1], [], [1], [], [], [], [], []]
    # The float32-per-merge rule (sparsebench before): index 1's sum rounds to 1.0 in round 2.
    assert torch.tensor(1.0) + torch.tensor(HALF_ULP) == torch.tensor(1.0)
    assert 1.0 + HALF_ULP != 1.0  # in float64 it does not


def test_sixteen_ranks_add_in_float64_and_round_what_they_send_to_float32():
    """k = 2, by hand. Index 0: rank 0's 1 meets 2^-24 from ranks 2 (round 2), 4 (round 3) and 8
    (round 4): rank 0 adds them in float64 to 1 + 3 * 2^-24, rounded at the end to float32 (a
    tie between 1 + 2^-23 and 1 + 2^-22: the even one) 1 + 2^-22, where float32-per-merge rounds
    every step back to 1 (two ulps apart). Index 1: rank 8 holds 1 + 2^-24 in float64 after
    round 2 (its 1, rank 10's 2^-24) and sends it rounded to float32, 1; rank 0 adds its own
    2^-24: 1 + 2^-24, rounded at the end to 1. Had rank 8 sent its float64 value, rank 0 would
    hold 1 + 2^-23."""
    ranks = [zeros_at(6, 7)] * 16
    ranks[0] = {0: 1.0, 1: HALF_ULP}
    ranks[2] = {0: HALF_ULP, 5: 0.0}
    ranks[4] = {0: HALF_ULP, 5: 0.0}
    ranks[8] = {0: HALF_ULP, 1: 1.0}
    ranks[10] = {1: HALF_ULP, 5: 0.0}
    out, result, _ = merged(ranks)
    released = [(1 + 2.0 ** -22) / 16, 1 / 16]
    assert out[:2].tolist() == released and not out[2:].any()
    zeroed = [z.tolist() for z in result.zeroed]
    assert zeroed[0] == zeroed[8] == [0, 1] and zeroed[2] == zeroed[4] == [0] and zeroed[10] == [1]
    # What the two other rules give, by hand, in torch's float32 and Python's float64:
    one, half = torch.tensor(1.0), torch.tensor(HALF_ULP)
    float32_per_merge = ((one + half) + half) + half
    assert float32_per_merge == 1.0 and float(float32_per_merge) / 16 != released[0]
    float64_sent_unrounded = HALF_ULP + (1.0 + HALF_ULP)
    assert float(torch.tensor(float64_sent_unrounded)) / 16 != released[1]
    # The independent replay of the released rule agrees.
    selections = [torch.tensor(sorted(pairs)) for pairs in ranks]
    accs = [torch.zeros(8).index_put_((s,), torch.tensor([pairs[int(i)] for i in s])) for s, pairs in zip(selections, ranks)]
    assert {i: float(v) for i, v in gtopk_tree(selections, accs).items()} == {0: 1 + 2.0 ** -22, 1: 1.0}


def assert_matches_the_reference_tree(selections: list[torch.Tensor], accs: list[torch.Tensor], numel: int) -> None:
    """The hosted exchange's aggregate and residuals equal the independent replay's, bit for bit."""
    world_size = len(accs)
    comm = RankCollectives(world_size, list(range(world_size)), use_process_group=False)
    out = torch.empty(numel)
    result = exchange(ExchangeKind.TREE_MERGE, ExchangeRequest(selections, accs, out, comm))
    final = gtopk_tree(selections, accs)
    expected = torch.zeros(numel)
    for index, value in final.items():
        expected[index] = float(value) / world_size
    assert torch.equal(out, expected)
    for selection, zeroed in zip(selections, result.zeroed):
        assert zeroed.tolist() == [i for i in selection.tolist() if i in final]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("world_size", [2, 8])
def test_random_lists_with_ties_match_the_reference_tree(seed, world_size):
    """Values from {-2, -1, 1, 2} make ties and duplicate indices at every merge."""
    generator = torch.Generator().manual_seed(seed)
    numel, k = 24, 5
    accs = [torch.randint(-2, 3, (numel,), generator=generator).float() for _ in range(world_size)]
    selections = [torch.randperm(numel, generator=generator)[:k].sort().values for _ in range(world_size)]
    assert_matches_the_reference_tree(selections, accs, numel)


@pytest.mark.parametrize("workers, fix", [(3, "workers=2 or workers=4"), (12, "workers=8 or workers=16")])
def test_a_world_that_is_no_power_of_2_is_refused_naming_the_fix(workers, fix):
    with pytest.raises(ConfigError, match=f"workers={workers}: gtopk .* needs a power of 2 workers .*: set {fix}"):
        GTopK(Layout.from_shapes([("w", (10,))]), workers, 0, density=0.2)
    with pytest.raises(ConfigError, match=f"^workers={workers}: gtopk .*: set {fix}$"):
        preflight(["sparsifier=gtopk", f"workers={workers}", "dataset=digits", "model=mlp"])


@pytest.mark.parametrize("world_size", [8, 16])
def test_correlated_gradients_match_the_released_precision_to_the_bit(world_size):
    """Ranks whose gradients share a signal (most indices meet at every merge), where rounding
    every merge to float32 differs from the released float64 lists in several of the k values
    (8 to 14 of 200 at W = 8, 25 to 40 at W = 16 over ten seeds): the exchange matches the
    independent replay (tests/helpers/exchange_reference.py) in every value and residual."""
    generator = torch.Generator().manual_seed(world_size)
    numel, k = 1000, 200
    base = torch.randn(numel, generator=generator)
    accs = [base + 0.3 * torch.randn(numel, generator=generator) for _ in range(world_size)]
    selections = [acc.abs().topk(k).indices.sort().values for acc in accs]
    assert_matches_the_reference_tree(selections, accs, numel)
