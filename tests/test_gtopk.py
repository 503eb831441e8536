"""gTop-k (docs/algorithms.md, "gtopk"): the tree merge against cases worked out by hand from the
paper and the released `gtopk_sparse_allreduce` / `add_residuals`, against the plain reference
(tests/exchange_reference.py) on random inputs with ties, and its refusal of a W that is not a
power of 2. Hosted against real processes: tests/test_distributed.py (every method)."""
from __future__ import annotations

import pytest
import torch

from experiments.core.collectives import RankCollectives
from experiments.core.exchange import exchange
from experiments.errors import ConfigError
from experiments.launcher.compose import preflight
from sparsifiers.base import ExchangeKind
from sparsifiers.gtopk import GTopK
from sparsifiers.layout import Layout
from tests.exchange_reference import gtopk_tree, hosted_exchange


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


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("world_size", [2, 8])
def test_random_lists_with_ties_match_the_reference_tree(seed, world_size):
    """Values from {-2, -1, 1, 2} make ties and duplicate indices at every merge."""
    generator = torch.Generator().manual_seed(seed)
    numel, k = 24, 5
    accs = [torch.randint(-2, 3, (numel,), generator=generator).float() for _ in range(world_size)]
    selections = [torch.randperm(numel, generator=generator)[:k].sort().values for _ in range(world_size)]
    comm = RankCollectives(world_size, list(range(world_size)), use_process_group=False)
    out = torch.empty(numel)
    result = exchange(ExchangeKind.TREE_MERGE, selections, accs, out, comm)
    final = gtopk_tree(selections, accs)
    expected = torch.zeros(numel)
    for index, value in final.items():
        expected[index] = float(value) / world_size
    assert torch.equal(out, expected)
    for selection, zeroed in zip(selections, result.zeroed):
        assert zeroed.tolist() == [i for i in selection.tolist() if i in final]


@pytest.mark.parametrize("workers, fix", [(3, "workers=2 or workers=4"), (12, "workers=8 or workers=16")])
def test_a_world_that_is_no_power_of_2_is_refused_naming_the_fix(workers, fix):
    with pytest.raises(ConfigError, match=f"workers={workers}: gtopk .* needs a power of 2 workers .*: set {fix}"):
        GTopK(Layout.from_shapes([("w", (10,))]), workers, 0, density=0.2)
    with pytest.raises(ConfigError, match=f"^workers={workers}: gtopk .*: set {fix}$"):
        preflight(["sparsifier=gtopk", f"workers={workers}", "dataset=digits", "model=mlp"])
