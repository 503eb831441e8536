"""CLT-k against a plain reimplementation of docs/algorithms.md, and its invariants on random inputs."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from experiments.engine.rank.build import build_sparsifier
from experiments.engine.launcher.compose import compose_job
from experiments.runformat.errors import ConfigError
from experiments.engine.core.metrics import MetricContext, exchange_metrics
from sparsifiers.cltk import CLTK
from sparsifiers.common.layout import Layout
from tests.helpers.stepped_ranks import SteppedRanks, gradients

SIZES = [400, 20, 1, 90, 300]


def layout_of(sizes: list[int]) -> Layout:
    return Layout.from_shapes((f"p{i}", (size,)) for i, size in enumerate(sizes))


def make_world(sizes: list[int], world_size: int, density: float, **knobs) -> SteppedRanks:
    return SteppedRanks([CLTK(layout_of(sizes), world_size, r, density, **knobs) for r in range(world_size)])


def ref_run(sizes: list[int], world_size: int, density: float, steps: int) -> list[set[int]]:
    """docs/algorithms.md, CLT-k: the leader t mod W takes its k largest |acc|; everyone sends there
    and zeroes there. Returns the aggregated index set per step."""
    numel = sum(sizes)
    k = math.floor(density * numel)
    residuals = [torch.zeros(numel) for _ in range(world_size)]
    history = []
    for t in range(steps):
        accs = [residual + grad for residual, grad in zip(residuals, gradients(sizes, world_size, t))]
        values = accs[t % world_size].tolist()
        chosen = sorted(range(numel), key=lambda i: (-abs(values[i]), i))[:k]
        for r in range(world_size):
            residuals[r] = accs[r].clone()
            residuals[r][chosen] = 0
        history.append(set(chosen))
    return history


@pytest.mark.parametrize("world_size, select_on", [(1, "leader"), (2, "leader"), (5, "leader"), (5, "all")])
def test_matches_reference(world_size: int, select_on: str) -> None:
    steps, density = 60, 0.03
    world = make_world(SIZES, world_size, density, select_on=select_on)
    expected = ref_run(SIZES, world_size, density, steps)
    for t in range(steps):
        got = world.step(gradients(SIZES, world_size, t), t)
        assert got.leader == t % world_size
        for r in range(world_size):  # every rank's selection is the leader's
            assert set(got.selections[r].tolist()) == expected[t], f"step {t}, rank {r}"


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 400), min_size=1, max_size=6),
    world_size=st.integers(1, 16),
    density=st.floats(0.002, 0.5),
    seed=st.integers(0, 2**16),
)
def test_exactly_k_from_the_leader(sizes: list[int], world_size: int, density: float, seed: int) -> None:
    numel = sum(sizes)
    k = math.floor(density * numel)
    assume(k >= 1)
    world = make_world(sizes, world_size, density)
    context = MetricContext(numel, k, density, world.sparsifiers[0].scope, world_size, 1.0)
    for t in range(3):
        got = world.step(gradients(sizes, world_size, t, seed), t)
        expected_counts = torch.zeros(world_size, dtype=torch.int64)
        expected_counts[t % world_size] = k  # only the leader selected
        assert torch.equal(got.result.counts, expected_counts) and got.result.aggregated == k
        metrics = exchange_metrics(got.result, world.comm.meter, context)
        assert metrics["buildup"] == 1.0 and metrics["density/error"] == 0.0
        chosen = got.selections[0]
        assert chosen.unique().numel() == k
        top = torch.topk(got.accs[t % world_size].abs(), k).values.min()
        assert bool((got.accs[t % world_size].abs()[chosen] >= top).all())  # the leader's top-k
        for r in range(world_size):
            assert torch.equal(got.selections[r], chosen)
            # Error feedback loses nothing: acc = transmitted + residual, exactly.
            transmitted = torch.zeros(numel)
            transmitted[chosen] = got.accs[r][chosen]
            assert torch.equal(got.residuals[r] + transmitted, got.accs[r])
            assert not bool(got.residuals[r][chosen].any())


def test_non_leaders_do_not_select() -> None:
    leader = CLTK(layout_of(SIZES), 3, 0, 0.03, select_on="leader")
    follower = CLTK(layout_of(SIZES), 3, 1, 0.03, select_on="leader")
    plan = leader.make_plan(torch.randn(sum(SIZES)), 0)

    def no_top_k(*args, **kwargs):
        raise AssertionError("a follower ran a top-k under select_on=leader")

    follower._top_k = no_top_k
    assert follower.select(torch.randn(sum(SIZES)), 0, plan) is plan
    with pytest.raises(ValueError, match="plan"):
        follower.select(torch.randn(sum(SIZES)), 0, None)
    # select_on=all (the default): the released code's wasted selection on every rank, same result.
    wasteful = CLTK(layout_of(SIZES), 3, 1, 0.03)
    ran = []
    top_k = wasteful._top_k
    wasteful._top_k = lambda acc, k: ran.append(k) or top_k(acc, k)
    assert wasteful.select(torch.randn(sum(SIZES)), 0, plan) is plan and ran == [wasteful.k]


def compose(*overrides: str):
    return compose_job(["sparsifier=cltk", "dataset=synthetic", "model=mlp", *overrides])


def test_builds_from_config() -> None:
    sparsifier = build_sparsifier(compose(), layout_of(SIZES), 2)
    assert isinstance(sparsifier, CLTK) and sparsifier.plan_leader(6) == 6 % 4
    assert sparsifier.describe()["exchange"] == "leader_broadcast"
    assert sparsifier.describe()["select_on"] == "all"  # the released code's behaviour


@pytest.mark.parametrize(
    "override, key",
    [
        ("sparsifier.exchange=union_allreduce", "sparsifier.exchange"),
        ("sparsifier.density=1.5", "sparsifier.density"),
        ("sparsifier.select_on=some", "sparsifier.select_on"),
    ],
)
def test_bad_knobs_name_the_key(override: str, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        build_sparsifier(compose(override), layout_of(SIZES), 0)


def test_real_step() -> None:
    """The real training step (tests/helpers/harness.py, one process hosting 4 ranks)."""
    from experiments.engine.core.world import init_world
    from tests.helpers.harness import run_method

    record = run_method("cltk", 4, 5, [], init_world(4, "cpu", "gloo", 60))
    for step, selections in enumerate(record["selections"]):
        assert all(torch.equal(s, selections[0]) for s in selections.values())
        assert record["counts"][step].tolist() == [selections[0].numel() if r == step % 4 else 0 for r in range(4)]
        assert record["exchange"][step]["buildup"] == 1.0
