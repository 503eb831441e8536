"""DGC against a plain reimplementation of docs/algorithms.md; each of its four techniques alone;
invariants on random inputs."""
from __future__ import annotations

import math
import random
from itertools import islice

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from experiments.runformat import metric_keys as keys
from experiments.engine.core.metrics import MetricContext, exchange_metrics
from experiments.engine.core.traffic import dense_allreduce_bytes
from experiments.engine.rank.build import build_optimizer, build_sparsifier
from experiments.engine.launcher.compose import compose_job
from experiments.runformat.errors import ConfigError
from sparsifiers.dgc import DGC
from sparsifiers.common.layout import Layout
from tests.helpers.stepped_ranks import SteppedRanks, gradients

SIZES = [1500, 40, 1, 300, 10, 600]
WARMUP = [0.25, 0.0625, 0.015625, 0.004]


def layout_of(sizes: list[int]) -> Layout:
    return Layout.from_shapes((f"p{i}", (size,)) for i, size in enumerate(sizes))


def make_world(sizes: list[int], world_size: int, density: float, **knobs) -> SteppedRanks:
    return SteppedRanks([DGC(layout_of(sizes), world_size, r, density, **knobs) for r in range(world_size)])


# -- the reference: docs/algorithms.md, DGC, written plainly -----------------------------------------
def ref_density(epoch: int, density: float, warmup: bool) -> float:
    if warmup and epoch < len(WARMUP):
        return max(WARMUP[epoch], density)  # a warm-up stage never runs sparser than the target
    return density


def ref_select(magnitude: list[float], density: float, rng: random.Random) -> set[int]:
    """Threshold from the top of a strided sample (random start), lowered by 0.8 up to 10 times
    while fewer than 0.8 k pass it; more than 1.3 k candidates: their exact top k."""
    numel = len(magnitude)
    k = max(1, math.floor(density * numel))
    wanted = min(numel, max(math.ceil(numel * 0.01), math.ceil(2 / density)))
    stride = numel // wanted
    samples = magnitude[rng.randrange(stride) :: stride]
    threshold = sorted(samples, reverse=True)[math.ceil(len(samples) * density) - 1]
    for attempt in range(11):
        candidates = [i for i in range(numel) if magnitude[i] >= threshold]
        if len(candidates) >= 0.8 * k or attempt == 10:
            break
        threshold = float(torch.tensor(threshold, dtype=torch.float32) * 0.8)  # float32, as |v|
    if len(candidates) > 1.3 * k:
        candidates = sorted(candidates, key=lambda i: (-magnitude[i], i))[:k]
    return set(candidates)


def ref_run(sizes, world_size, density, steps, steps_per_epoch, momentum, clip_norm, warmup) -> list[list[set[int]]]:
    numel = sum(sizes)
    u = [torch.zeros(numel) for _ in range(world_size)]
    v = [torch.zeros(numel) for _ in range(world_size)]
    rngs = [random.Random(f"dgc/0/{r}") for r in range(world_size)]
    history = []
    for t in range(steps):
        d = ref_density(t // steps_per_epoch, density, warmup)
        chosen = []
        for r, g in enumerate(gradients(sizes, world_size, t)):
            coef = 1.0
            if clip_norm is not None:  # local clipping, the norm scaled by W^-1/2
                coef = min(1.0, clip_norm / math.sqrt(world_size) / (float(torch.linalg.vector_norm(g)) + 1e-6))
            u[r] = (u[r] * momentum).add_(g, alpha=coef)  # momentum correction
            v[r] = v[r] + u[r]
            chosen.append(ref_select([abs(x) for x in v[r].tolist()], d, rngs[r]))
        for r in range(world_size):  # v and u both zeroed where sent (momentum factor masking)
            v[r][sorted(chosen[r])] = 0
            u[r][sorted(chosen[r])] = 0
        history.append(chosen)
    return history


@pytest.mark.parametrize(
    "world_size, clip_norm, warmup", [(1, None, True), (3, None, True), (3, 60.0, True), (4, 60.0, False)]
)
def test_matches_reference(world_size: int, clip_norm: float | None, warmup: bool) -> None:
    steps, steps_per_epoch, density = 60, 10, 0.002
    world = make_world(SIZES, world_size, density, momentum=0.9, clip_norm=clip_norm, warmup=warmup)
    expected = ref_run(SIZES, world_size, density, steps, steps_per_epoch, 0.9, clip_norm, warmup)
    clipped = 0
    for t in range(steps):
        if t % steps_per_epoch == 0:
            for sparsifier in world.sparsifiers:
                sparsifier.start_epoch(t // steps_per_epoch, steps_per_epoch)
        got = world.step(gradients(SIZES, world_size, t), t)
        clipped += world.sparsifiers[0].metrics()["dgc/clip_coef"] < 1.0
        for r in range(world_size):
            assert set(got.selections[r].tolist()) == expected[t][r], f"step {t}, rank {r}"
    assert (clipped > 0) == (clip_norm is not None)  # the clipping runs really clipped


# -- the four techniques, one at a time ---------------------------------------------------------
def test_momentum_correction() -> None:
    """u = m u + g is what precondition returns; the world adds it to v, so acc = v + u."""
    world = make_world(SIZES, 2, 0.01, momentum=0.5, warmup=False)
    grads0, grads1 = gradients(SIZES, 2, 0), gradients(SIZES, 2, 1)
    first = world.step(grads0, 0)
    for r in range(2):
        assert torch.equal(first.accs[r], grads0[r])  # u_0 = g_0, v_0 = 0
    masked = [s.state_dict()["velocity"] for s in world.sparsifiers]
    second = world.step(grads1, 1)
    for r in range(2):
        u1 = masked[r] * 0.5 + grads1[r]
        assert torch.equal(second.accs[r], first.residuals[r] + u1)


def test_momentum_factor_masking() -> None:
    """After the exchange, u is zero exactly where this rank's v was sent, untouched elsewhere."""
    world = make_world(SIZES, 3, 0.01, momentum=0.9, warmup=False)
    world.step(gradients(SIZES, 3, 0), 0)
    before = [s.state_dict()["velocity"] for s in world.sparsifiers]
    got = world.step(gradients(SIZES, 3, 1), 1)
    for r, sparsifier in enumerate(world.sparsifiers):
        u = sparsifier.state_dict()["velocity"]
        sent = torch.zeros(sum(SIZES), dtype=torch.bool)
        sent[got.selections[r]] = True
        assert not bool(u[sent].any()) and not bool(got.residuals[r][sent].any())
        assert torch.equal(u[~sent], (before[r] * 0.9 + gradients(SIZES, 3, 1)[r])[~sent])
        assert bool(u[~sent].ne(0).all())


def test_local_clipping_scales_by_inverse_sqrt_workers() -> None:
    numel = sum(SIZES)
    sparsifier = DGC(layout_of(SIZES), 4, 0, 0.01, momentum=0.0, clip_norm=2.0)
    big = torch.randn(numel, generator=torch.Generator().manual_seed(1)) * 10
    assert float(torch.linalg.vector_norm(sparsifier.precondition(big))) == pytest.approx(2.0 / math.sqrt(4), rel=1e-5)
    small = big / float(torch.linalg.vector_norm(big)) * 0.5  # below the bound of 1.0: untouched
    assert torch.equal(sparsifier.precondition(small), small)
    unclipped = DGC(layout_of(SIZES), 4, 0, 0.01, momentum=0.0, clip_norm=None)
    assert torch.equal(unclipped.precondition(big), big)


def compose(*overrides: str):
    return compose_job(["sparsifier=dgc", "dataset=synthetic", "model=mlp", *overrides])


@pytest.mark.parametrize("warmup", [True, False])
def test_warmup_schedule(warmup: bool) -> None:
    cfg = compose("sparsifier.density=0.001", f"sparsifier.warmup={str(warmup).lower()}")
    layout = layout_of([20000, 5000, 100])
    sparsifier = build_sparsifier(cfg, layout, 0)
    acc = torch.randn(layout.numel, generator=torch.Generator().manual_seed(3))
    expected = [0.25, 0.0625, 0.015625, 0.004, 0.001, 0.001] if warmup else [0.001] * 6
    for epoch, density in enumerate(expected):
        sparsifier.start_epoch(epoch, 100)
        assert sparsifier.metrics()["dgc/density"] == density
        k = math.floor(density * layout.numel)
        assert 0.8 * k <= sparsifier.select(acc, epoch).numel() <= 1.3 * k
    assert sparsifier.k == math.floor(0.001 * layout.numel)  # the base target does not move


@pytest.mark.parametrize(
    "stages, densities, ks",
    [
        # The default stages with target 0.05 on N = 2000: 1.5625% (k 31) and 0.4% (k 8) are
        # sparser than the target, so those epochs run at 0.05, k = floor(0.05 * 2000) = 100.
        (None, [0.25, 0.0625, 0.05, 0.05, 0.05, 0.05], [500, 125, 100, 100, 100, 100]),
        # A custom schedule: the floor is per stage, so a denser stage after a sparse one keeps
        # its own density (0.01 -> 0.05, then 0.2 stays 0.2).
        ([0.5, 0.01, 0.2], [0.5, 0.05, 0.2, 0.05], [1000, 100, 400, 100]),
    ],
)
def test_a_warmup_stage_below_the_target_runs_at_the_target(stages, densities, ks) -> None:
    """One step per epoch, 2 ranks: each epoch's density, k, the selection sizes, and what the
    runner logs for the step (density/target and the density error against that k)."""
    sizes, world_size, target = [1500, 500], 2, 0.05
    knobs = {} if stages is None else {"warmup_densities": stages}
    world = make_world(sizes, world_size, target, momentum=0.9, **knobs)
    method = world.sparsifiers[0]
    context = MetricContext(2000, 100, target, method.scope, world_size, dense_allreduce_bytes(2000, world_size),
                            exchange=method.exchange)
    for epoch, (density, k) in enumerate(zip(densities, ks)):
        for sparsifier in world.sparsifiers:
            sparsifier.start_epoch(epoch, 1)
            assert (sparsifier.current_density, sparsifier.current_k) == (density, k)
        got = world.step(gradients(sizes, world_size, epoch), epoch)
        assert method.metrics()[keys.DGC_DENSITY] == density
        assert all(0.8 * k <= count <= 1.3 * k for count in got.counts), (epoch, got.counts)
        logged = exchange_metrics(got.result, world.comm.meter, context, method.current_k, method.current_density)
        assert logged[keys.DENSITY_TARGET] == density
        assert logged[keys.DENSITY_ERROR] == got.aggregated / k - 1.0
    assert method.k == 100  # the configured target does not move


def test_warmup_in_the_real_step() -> None:
    """Four epochs of two real steps each (one process hosting 2 ranks): the selection sizes
    follow the schedule, and the optimizer runs without momentum."""
    from experiments.engine.core.step import train_step
    from experiments.engine.rank.train import build_session
    from experiments.engine.core.world import init_world
    from tests.helpers.harness import TINY

    world = init_world(2, "cpu", "gloo", 60)
    cfg = compose_job(["sparsifier=dgc", "sparsifier.density=0.002", "workers=2", *TINY])
    session = build_session(cfg, world)
    assert session.optimizer.param_groups[0]["momentum"] == 0.0
    step = 0
    for epoch, density in enumerate([0.25, 0.0625, 0.015625, 0.004]):
        for sparsifier in session.ranks.sparsifiers:
            sparsifier.start_epoch(epoch, session.replicas[0].batches.steps_per_epoch)
        batches = zip(*(r.batches.epoch(epoch) for r in session.replicas))
        for pair in islice(batches, 2):
            outcome = train_step(session.ranks, session.model, session.task, session.optimizer,
                                 session.replicas, list(pair), step, measure_norms=False)
            k = math.floor(density * session.layout.numel)
            assert session.method.metrics()["dgc/density"] == density
            assert all(0.8 * k <= int(c) <= 1.3 * k for c in outcome.result.counts)
            step += 1


# -- properties on random layouts ---------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 500), min_size=1, max_size=6),
    world_size=st.integers(1, 16),
    density=st.floats(0.002, 0.3),
    momentum=st.floats(0.0, 0.95),
    seed=st.integers(0, 2**16),
)
def test_invariants(sizes: list[int], world_size: int, density: float, momentum: float, seed: int) -> None:
    numel = sum(sizes)
    assume(math.floor(density * numel) >= 1)
    world = make_world(sizes, world_size, density, momentum=momentum, warmup=False)
    k = world.sparsifiers[0].k
    for t in range(3):
        got = world.step(gradients(sizes, world_size, t, seed), t)
        expected = torch.zeros(numel)
        for r, sparsifier in enumerate(world.sparsifiers):
            chosen = got.selections[r]
            assert 1 <= chosen.numel() <= 1.3 * k and chosen.unique().numel() == chosen.numel()
            # Error feedback loses nothing: acc = transmitted (own selection) + residual, exactly.
            transmitted = torch.zeros(numel)
            transmitted[chosen] = got.accs[r][chosen]
            assert torch.equal(got.residuals[r] + transmitted, got.accs[r])
            assert not bool(sparsifier.state_dict()["velocity"][chosen].any())
            expected[chosen] += got.accs[r][chosen]
        assert torch.allclose(got.aggregate, expected / world_size)


# -- config and state ---------------------------------------------------------------------------
def test_builds_from_config_and_owns_momentum() -> None:
    cfg = compose()
    sparsifier = build_sparsifier(cfg, layout_of(SIZES), 1)
    assert isinstance(sparsifier, DGC) and DGC.owns_momentum
    assert sparsifier.describe()["clip_norm"] is None and sparsifier.describe()["warmup"] is True
    optimizer = build_optimizer(cfg, torch.nn.Linear(3, 1), sparsifier)
    assert optimizer.param_groups[0]["momentum"] == 0.0


@pytest.mark.parametrize(
    "override, key",
    [
        ("sparsifier.momentum=1.5", "sparsifier.momentum"),
        ("sparsifier.clip_norm=-1", "sparsifier.clip_norm"),
        ("sparsifier.warmup_densities=[0.5,2.0]", "sparsifier.warmup_densities"),
        ("sparsifier.sample_fraction=0", "sparsifier.sample_fraction"),
        ("sparsifier.max_retries=-1", "sparsifier.max_retries"),
        ("sparsifier.upper_bound=0.5", "sparsifier.upper_bound"),
        ("sparsifier.lower_bound=1.2", "sparsifier.lower_bound"),
        ("sparsifier.exchange=union_allreduce", "sparsifier.exchange"),
    ],
)
def test_bad_knobs_name_the_key(override: str, key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        build_sparsifier(compose(override), layout_of(SIZES), 0)


def test_state_round_trip_resumes_exactly() -> None:
    knobs = dict(momentum=0.9, clip_norm=60.0)
    world = make_world(SIZES, 3, 0.002, **knobs)
    for t in range(4):
        world.step(gradients(SIZES, 3, t), t)
    states = [s.state_dict() for s in world.sparsifiers]
    resumed = make_world(SIZES, 3, 0.002, **knobs)
    for sparsifier, state in zip(resumed.sparsifiers, states):
        sparsifier.load_state_dict(state)
        again = sparsifier.state_dict()
        assert torch.equal(again.pop("velocity"), state["velocity"])
        assert again == {key: value for key, value in state.items() if key != "velocity"}
    for mine, theirs in zip(resumed.residuals, world.residuals):  # v lives in the world
        mine.copy_(theirs)
    for t in range(4, 10):
        a, b = world.step(gradients(SIZES, 3, t), t), resumed.step(gradients(SIZES, 3, t), t)
        assert all(torch.equal(x, y) for x, y in zip(a.selections, b.selections))
