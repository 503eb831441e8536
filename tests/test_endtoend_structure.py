"""The split methods' replay at other W (experiments/studies/endtoend/structure.py) against the methods
themselves: hosted worlds of real MiCRO, ExDyna and DEFT ranks run at W and at W', the replay fed
the W world's logged histograms (experiments/engine/core/positions.py) and compared with what the W'
world's busiest rank sent. Every rank gets the same gradient, so the partitions, not the data,
are what differs between W and W'."""
from __future__ import annotations

import statistics

import numpy as np
import pytest
import torch

from experiments.engine.core import positions
from experiments.studies.endtoend.extrapolate import Replay, fit_statistics
from experiments.studies.endtoend.structure import Histograms, masses, structure_of
from sparsifiers.deft import DEFT
from sparsifiers.exdyna import ExDyna
from sparsifiers.common.layout import Layout
from sparsifiers.micro import Micro
from tests.helpers.stepped_ranks import SteppedRanks

STEPS, SETTLE = 24, 8
# A dense region near the end (a classifier's weights) and a quiet start, as a CNN's gradient.
SIZES = [3000, 40, 9000, 64, 2500, 10]
NUMEL = sum(SIZES)


def layout() -> Layout:
    return Layout.from_shapes((f"p{i}", (size,)) for i, size in enumerate(SIZES))


def gradient(step: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1000 + step)
    scale = torch.cat([torch.full((size,), float(1 + 3 * (i == 4) + 0.2 * i)) for i, size in enumerate(SIZES)])
    return torch.randn(NUMEL, generator=generator) * scale


def run(make, workers: int, steps: int = STEPS, bins: int = NUMEL) -> tuple[list[Histograms], list[int], list[int]]:
    """A hosted world of `workers` ranks, the same gradient on each: its histograms (every step
    logged), and each step's k_max and |U|."""
    world = SteppedRanks([make(workers, rank) for rank in range(workers)])
    rows, k_max, union = [], [], []
    for step in range(steps):
        done = world.step([gradient(step)] * workers, step)
        rows.append(Histograms(step, np.asarray(positions.position_counts(done.aggregate, bins), dtype=np.float64),
                               np.asarray(positions.energy(done.accs[0], bins), dtype=np.float64)))
        k_max.append(max(done.counts))
        union.append(done.aggregated)
    return rows, k_max, union


def window_median(values: list[int]) -> float:
    return statistics.median(values[SETTLE:])


def micro(workers: int, rank: int) -> Micro:
    return Micro(layout(), workers, rank, 0.01, threshold_start="released")


def exdyna(workers: int, rank: int) -> ExDyna:
    return ExDyna(layout(), workers, rank, 0.01, blocks=64, block_align=32)


def deft(workers: int, rank: int) -> DEFT:
    return DEFT(layout(), workers, rank, 0.01)


def test_the_histograms_hold_the_aggregate_and_the_energy_per_bin():
    aggregate = torch.tensor([0.0, 1.0, 0.0, -2.0, 3.0, 0.0, 0.0, 4.0, 5.0, 0.0])
    assert positions.bin_edges(10, 3) == [0, 3, 6, 10]
    assert positions.position_counts(aggregate, 3) == [1, 2, 2]
    assert positions.energy(aggregate, 3) == [1.0, 13.0, 41.0]
    assert positions.position_counts(aggregate, 64) == [int(v != 0) for v in aggregate]  # at most N bins
    # a boundary inside a bin takes its share of it
    edges, cumulative = np.array([0.0, 4.0, 8.0]), np.array([0.0, 8.0, 8.0])
    assert masses(edges, cumulative, [0, 2, 6, 8]).tolist() == [4.0, 4.0, 0.0]


@pytest.mark.parametrize("make, method", [(micro, "micro"), (exdyna, "exdyna")], ids=["micro", "exdyna"])
def test_the_threshold_methods_replay_gives_the_busiest_rank_of_a_world_at_another_w(make, method):
    rows, k_max_at_4, _ = run(make, 4)
    sparsifier = make(4, 0)
    replay = structure_of(method, NUMEL, sparsifier.k, rows, SETTLE, STEPS, sparsifier.describe(), tuple(SIZES))
    assert replay.at(4)["k_max"] == window_median(k_max_at_4)  # its own W, exactly
    for workers in (8, 16):
        _, k_max, _ = run(make, workers)
        assert replay.at(workers)["k_max"] == window_median(k_max), workers


def test_exdyna_replays_its_remainder_partition():
    """B = 64 blocks of 224 elements leave a remainder of 178 to the last partition: with the
    dense region at the end, the busiest rank stops shrinking as W grows."""
    rows, _, _ = run(exdyna, 4)
    sparsifier = exdyna(4, 0)
    assert sparsifier.remainder > 0
    replay = structure_of("exdyna", NUMEL, sparsifier.k, rows, SETTLE, STEPS, sparsifier.describe(), tuple(SIZES))
    k_max = [replay.at(w)["k_max"] for w in (4, 16, 64)]
    _, measured, _ = run(exdyna, 64)
    assert k_max[-1] == window_median(measured)
    assert k_max[-1] > k_max[0] / 16  # far from the 1/W a power law in the mean would give


@pytest.mark.parametrize("workers", [2, 8, 32])
def test_the_deft_replay_gives_the_plan_the_union_and_the_busiest_bin(workers):
    """One step (the worlds' accumulators part after it): the replay from the W = 4 world's
    energy against a real world at W."""
    rows, _, _ = run(deft, 4, steps=1)
    sparsifier = deft(4, 0)
    replay = structure_of("deft", NUMEL, sparsifier.k, rows, 0, 1, sparsifier.describe(), tuple(SIZES))
    world = SteppedRanks([deft(workers, rank) for rank in range(workers)])
    done = world.step([gradient(0)] * workers, 0)
    replayed = replay.at(workers)
    assert replayed["plan"] == done.plan.numel()
    assert replayed["union"] == done.aggregated
    assert replayed["k_max"] == max(done.counts)


def test_coarse_bins_replay_close_to_exact_ones():
    """4096 bins over 11 million ResNet-18 coordinates are 2,700 wide: a replay from coarse bins
    stays near the exact one."""
    rows, _, _ = run(micro, 4)
    coarse, _, _ = run(micro, 4, bins=64)
    exact = structure_of("micro", NUMEL, micro(4, 0).k, rows, SETTLE, STEPS, {}, ())
    rough = structure_of("micro", NUMEL, micro(4, 0).k, coarse, SETTLE, STEPS, {}, ())
    for workers in (8, 32):
        assert rough.at(workers)["k_max"] == pytest.approx(exact.at(workers)["k_max"], rel=0.15)


def test_the_statistics_average_the_replays_of_the_two_largest_hosted_w_each_anchored_at_its_own():
    replays = []
    for workers in (2, 4):
        rows, k_max, _ = run(exdyna, workers)
        sparsifier = exdyna(workers, 0)
        structure = structure_of("exdyna", NUMEL, sparsifier.k, rows, SETTLE, STEPS, sparsifier.describe(), tuple(SIZES))
        # as if the hosted run had measured a little more than its replay
        replays.append(Replay(workers, structure, {"k_max": window_median(k_max) * 1.1, "union": 10_000.0}))
    two, four = replays
    # a second seed at W = 4: the same positions, measured 20% higher still
    four_again = Replay(4, four.structure, {"k_max": four.measured["k_max"] * 1.2, "union": 10_000.0})
    measured = [999.0, two.measured["k_max"], (four.measured["k_max"] + four_again.measured["k_max"]) / 2]
    stats = fit_statistics([1, 2, 4], [10_000.0] * 3, measured, [1.0] * 3, NUMEL, split=True,
                           replays=[two, four, four_again])
    assert stats.at(4)["k_max"] == measured[2]  # hosted: as measured (the mean over its seeds)
    anchored = [r.structure.at(16)["k_max"] * r.measured["k_max"] / r.structure.at(r.workers)["k_max"]
                for r in (two, four, four_again)]
    assert stats.at(16)["k_max"] == pytest.approx(sum(anchored) / 3)  # every run at the two largest W
    only_largest = fit_statistics([2, 4], [10_000.0] * 2, measured[1:], [1.0] * 2, NUMEL, split=True, replays=[four])
    assert only_largest.at(16)["k_max"] == pytest.approx(four.structure.at(16)["k_max"] * 1.1)
    not_the_smallest = fit_statistics([1, 2, 4, 8], [10_000.0] * 4, [999.0, *measured[1:], 50.0], [1.0] * 4, NUMEL,
                                      split=True, replays=[Replay(1, two.structure, two.measured), *replays])
    assert [r.workers for r in not_the_smallest.replays] == [2, 4]


def test_runs_without_histograms_or_of_other_methods_are_not_replayed():
    rows, _, _ = run(micro, 4, steps=2)
    assert structure_of("topk", NUMEL, 100, rows, 0, 2, {}, ()) is None
    assert structure_of("micro", NUMEL, 100, [], 0, 2, {}, ()) is None
    assert structure_of("deft", NUMEL, 100, rows, 0, 2, {}, ()) is None  # DEFT needs the layout
