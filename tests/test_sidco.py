"""SIDCo (sparsifiers/sidco.py, docs/algorithms.md "sidco"): thresholds worked out by hand on
small vectors for each fit and for the later stages, the strict comparison, the adaptive stage
count, the edge cases where the released code has a defect, error feedback, a plain float64
reimplementation through the production step, resume, allocation and bad knobs."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import gammaincinv
from torch.utils._python_dispatch import TorchDispatchMode

from experiments.runformat import metric_keys as keys
from experiments.runformat.errors import ConfigError
from experiments.engine.launcher.compose import compose_job
from experiments.engine.rank.build import build_sparsifier
from sparsifiers.common.exchange_kinds import ExchangeKind, Feedback
from sparsifiers.common.layout import Layout
from sparsifiers.sidco import SIDCo, gpd_threshold
from sparsifiers.common.threshold_control import strict_cut
from tests.helpers.compiled_calls import kernel_backend
from tests.helpers.stepped_ranks import SteppedRanks, assert_resume_is_exact, noise
from tests.test_threshold_methods import allocation_bound, drifting_stream, measured_selects

LAYOUT = Layout.from_shapes([("a", (40, 50)), ("b", (1000,)), ("c", (3,))])  # N = 3003


def ramp(n: int) -> torch.Tensor:
    """acc = (1, -2, 3, -4, ..., +-n): x_i = i / sqrt(sum i^2), statistics easy by hand."""
    i = torch.arange(1, n + 1, dtype=torch.float32)
    return i * torch.where(i % 2 == 1, 1.0, -1.0)


def one(n: int, density: float, **knobs) -> SIDCo:
    return SIDCo(Layout.from_shapes([("w", (n,))]), 1, 0, density, **knobs)


def run(sparsifier: SIDCo, acc: torch.Tensor) -> tuple[list[int], float, float]:
    chosen = sparsifier.select(acc, 0).tolist()
    state = sparsifier.metrics()
    return chosen, state[keys.THRESHOLD], state[keys.STAGES]


# -- the first stage, by hand: x_i = i / sqrt(385), i = 1..10, d = 0.5 (q1 = d: one stage) ------
NORM10 = math.sqrt(385.0)


def test_exponential_threshold_by_hand():
    # mean(x) = 5.5 / sqrt(385); th = -mean ln 0.5 = 3.8123 / sqrt(385): i >= 4 pass.
    chosen, threshold, stages = run(one(10, 0.5, distribution="exp"), ramp(10))
    assert threshold == pytest.approx(5.5 * math.log(2) / NORM10, rel=1e-6)
    assert chosen == [3, 4, 5, 6, 7, 8, 9] and stages == 1


def test_generalized_pareto_threshold_by_hand():
    # m = 5.5, v = 55/6 (unbiased) in units of 1/sqrt(385): m^2/v = 3.3, sigma = m (3.3 + 1)/2 =
    # 2.15 m, c = (3.3 - 1)/2 = 1.15; th = sigma (1 - 0.5^1.15) / 1.15 = 5.649: i >= 6 pass.
    chosen, threshold, _ = run(one(10, 0.5, distribution="gpareto"), ramp(10))
    assert threshold == pytest.approx(2.15 * 5.5 * (1 - 0.5 ** 1.15) / 1.15 / NORM10, rel=1e-6)
    assert 2.15 * 5.5 * (1 - 0.5 ** 1.15) / 1.15 == pytest.approx(5.649, abs=1e-3)
    assert chosen == [5, 6, 7, 8, 9]


def test_gamma_threshold_by_hand():
    # s = ln mean - mean ln = ln 5.5 - ln(10!)/10 = 0.19431 (scale-free; eps is far below x);
    # a = (3 - s + sqrt((s - 3)^2 + 24 s)) / (12 s) = 2.7217; b = mean / a;
    # th = b * gammaincinv(a, 1 - 0.5).
    s = math.log(5.5) - math.log(3628800) / 10
    a = (3 - s + math.sqrt((s - 3) ** 2 + 24 * s)) / (12 * s)
    assert s == pytest.approx(0.19431, abs=1e-5) and a == pytest.approx(2.7217, abs=1e-4)
    expected = 5.5 / a * float(gammaincinv(a, 0.5))  # in units of 1 / sqrt(385)
    chosen, threshold, _ = run(one(10, 0.5, distribution="gamma"), ramp(10))
    assert threshold == pytest.approx(expected / NORM10, rel=1e-5)
    assert chosen == [i - 1 for i in range(1, 11) if i > expected]


# -- later stages, by hand: x_i = i / sqrt(2870), i = 1..20, d = 0.05 (q1 = 0.25, R = 0.2) --------
NORM20 = math.sqrt(2870.0)


def test_exponential_two_and_three_stages_by_hand():
    # Stage 1: th = 10.5 ln 4 = 14.556: survivors 15..20, t_min = 15, mean(y) = 2.5.
    # stages=2: rho = 0.2, th = 15 + 2.5 ln 5 = 19.024: only 20 passes.
    chosen, threshold, stages = run(one(20, 0.05, distribution="exp", stages=2), ramp(20))
    assert threshold == pytest.approx((15 + 2.5 * math.log(5)) / NORM20, rel=1e-6)
    assert chosen == [19] and stages == 2
    # stages=3: rho = sqrt(0.2); th = 15 - 2.5 ln rho = 17.012: survivors 18..20, t_min = 18,
    # mean(y) = 1; th = 18 - ln rho = 18.805: 19 and 20 pass.
    chosen, threshold, stages = run(one(20, 0.05, distribution="exp", stages=3), ramp(20))
    assert threshold == pytest.approx((18 - math.log(math.sqrt(0.2))) / NORM20, rel=1e-6)
    assert chosen == [18, 19] and stages == 3


def test_stages_zero_runs_as_many_rounds_as_i_ratio_needs():
    # rho = 0.5: L = ceil(ln 0.2 / ln 0.5) = 3 rounds at 0.5, 0.5, then 0.2 / 0.5^2 = 0.8.
    # 15 + 2.5 ln 2 = 16.73 -> 17..20; 17 + 1.5 ln 2 = 18.04 -> 19, 20; 19 - 0.5 ln 0.8 = 19.11 -> 20.
    chosen, threshold, stages = run(one(20, 0.05, distribution="exp", stages=0, i_ratio=0.5), ramp(20))
    assert threshold == pytest.approx((19 - 0.5 * math.log(0.8)) / NORM20, rel=1e-6)
    assert chosen == [19] and stages == 4


def test_generalized_pareto_two_stages_by_hand():
    # Stage 1 on 1..20: m = 10.5, v = 35, m^2/v = 3.15, sigma = 21.7875, c = 1.075;
    # th = sigma (1 - 0.25^c) / c = 15.70: survivors 16..20. Round on y = 0..4: m = 2, v = 2.5,
    # m^2/v = 1.6, sigma = 2.6, c = 0.3; th = 16 + 2.6 (1 - 0.2^0.3) / 0.3 = 19.32: only 20.
    first = 21.7875 * (1 - 0.25 ** 1.075) / 1.075
    assert 15 < first < 16
    chosen, threshold, stages = run(one(20, 0.05, distribution="gpareto", stages=2), ramp(20))
    assert threshold == pytest.approx((16 + 2.6 * (1 - 0.2 ** 0.3) / 0.3) / NORM20, rel=1e-5)
    assert chosen == [19] and stages == 2


def test_gamma_runs_the_generalized_pareto_after_its_first_stage():
    s = math.log(10.5) - math.lgamma(21) / 20  # ln mean - mean ln i, i = 1..20
    a = (3 - s + math.sqrt((s - 3) ** 2 + 24 * s)) / (12 * s)
    first = 10.5 / a * float(gammaincinv(a, 0.75))
    survivors = [i for i in range(1, 21) if i > first]
    y = np.array(survivors, dtype=float) - survivors[0]
    m, v = y.mean(), y.var(ddof=1)
    sigma, c = 0.5 * m * (m * m / v + 1), 0.5 * (m * m / v - 1)
    expected = survivors[0] + sigma * (1 - 0.2 ** c) / c
    chosen, threshold, _ = run(one(20, 0.05, distribution="gamma", stages=2), ramp(20))
    assert threshold == pytest.approx(expected / NORM20, rel=1e-5)
    assert chosen == [i - 1 for i in range(1, 21) if i > expected]


def test_a_ratio_of_a_quarter_or_more_lowers_the_threshold_in_later_rounds():
    # d >= 0.25: q1 = d, rho = (d / 0.25)^(1/(stages-1)) >= 1, so a later round's threshold lies
    # below its survivors' minimum: it prunes none of them, and the final selection over the whole
    # vector (as the released code's) grows. Exponential, d = 0.5, stages = 2: rho = 2;
    # th1 = 10.5 ln 2 = 7.28 -> survivors 8..20, t_min = 8, mean(y) = 6; th = 8 - 6 ln 2 = 3.84.
    chosen, threshold, stages = run(one(20, 0.5, distribution="exp", stages=2), ramp(20))
    assert threshold == pytest.approx((8 - 6 * math.log(2)) / NORM20, rel=1e-6)
    assert chosen == list(range(3, 20)) and stages == 2
    for distribution in ("gpareto", "gamma"):
        single = run(one(20, 0.5, distribution=distribution), ramp(20))[0]
        assert set(single) < set(run(one(20, 0.5, distribution=distribution, stages=3), ramp(20))[0])


# -- the comparison is strict ----------------------------------------------------------------------
def test_an_element_equal_to_the_threshold_is_not_selected(monkeypatch):
    sparsifier = one(10, 0.5)
    x = ramp(10).abs() / torch.linalg.vector_norm(ramp(10))
    monkeypatch.setattr(sparsifier, "_first_threshold", lambda values, q: float(x[4]))  # exactly x_5
    assert sparsifier.select(ramp(10), 0).tolist() == [5, 6, 7, 8, 9]
    cut = strict_cut(float(x[4]), torch.float32)
    assert cut > float(x[4]) and torch.nextafter(torch.tensor(cut), torch.tensor(0.0)) == x[4]


# -- the released code's defects, as intended ------------------------------------------------------
@pytest.mark.parametrize("distribution", ["exp", "gpareto", "gamma"])
@pytest.mark.parametrize("stages", [1, 3, -1])
def test_zero_accumulator_selects_nothing(distribution, stages):
    sparsifier = one(20, 0.05, distribution=distribution, stages=stages)
    assert sparsifier.select(torch.zeros(20), 0).numel() == 0
    assert math.isnan(sparsifier.metrics()[keys.THRESHOLD])


@pytest.mark.parametrize("distribution", ["exp", "gpareto", "gamma"])
def test_a_round_without_survivors_stops_at_the_previous_threshold(distribution):
    # Every |acc| equal: no x exceeds the first stage's threshold (the released .min() raises).
    sparsifier = one(20, 0.05, distribution=distribution, stages=3)
    chosen, threshold, stages = run(sparsifier, torch.full((20,), 0.3))
    assert chosen == [] and stages == 1 and math.isfinite(threshold)


def test_one_survivor_is_sent():
    # 10 and nineteen 1s: stage 1 (exp) th = 1.45 ln 4 = 2.01 in units of |acc| / norm leaves
    # the 10 alone; the released code then sets th = t_min and sends nothing. Here it stops.
    acc = torch.ones(20)
    acc[7] = 10.0
    norm = math.sqrt(100 + 19)
    for distribution in ("exp", "gpareto"):
        chosen, threshold, stages = run(one(20, 0.05, distribution=distribution, stages=2), acc)
        assert chosen == [7] and stages == 1 and threshold < 10 / norm
    assert run(one(20, 0.05, stages=2), acc)[1] == pytest.approx(1.45 * math.log(4) / norm, rel=1e-6)


def test_equal_survivors_stop_the_refinement():
    acc = torch.ones(20)
    acc[[3, 9]] = -10.0
    chosen, _, stages = run(one(20, 0.05, stages=3), acc)
    assert chosen == [3, 9] and stages == 1


def test_generalized_pareto_at_m_squared_equal_to_v_is_the_exponential():
    for m, q in ((0.3, 0.01), (2.0, 0.25), (1e-3, 0.5)):
        assert gpd_threshold(m, m * m, q) == pytest.approx(-m * math.log(q), rel=1e-12)
        near = gpd_threshold(m, m * m * (1 + 1e-9), q)  # continuous through c = 0
        assert near == pytest.approx(-m * math.log(q), rel=1e-6)
    assert gpd_threshold(0.4, 0.0, 0.1) == 0.4  # no spread: the limit v -> 0 (th -> m)
    assert gpd_threshold(0.4, 0.01, 1.0) == 0.0


def test_a_single_element_model_is_handled():
    for distribution in ("exp", "gpareto", "gamma"):
        chosen, threshold, _ = run(one(1, 1.0, distribution=distribution), torch.tensor([-2.0]))
        assert math.isfinite(threshold) and chosen == [0]  # d = 1: q1 = 1, th = 0 < x = 1


@settings(max_examples=80, deadline=None)
@given(
    values=st.lists(st.floats(-1e3, 1e3, width=32), min_size=1, max_size=60),
    distribution=st.sampled_from(["exp", "gpareto", "gamma"]),
    stages=st.integers(-3, 4),
    density=st.sampled_from([0.02, 0.1, 0.3, 1.0]),
)
def test_the_selection_is_every_x_above_the_reported_threshold(values, distribution, stages, density):
    """Whatever the data (zeros, ties, one element, a single spike): the selection is exactly
    {x > threshold} with the threshold rounded to float32, increasing and unique, and error
    feedback keeps the rest exactly (acc = what was sent + the residual)."""
    acc = torch.tensor(values, dtype=torch.float32)
    n = acc.numel()
    if math.floor(density * n) < 1:
        density = 1.0
    world = SteppedRanks([SIDCo(Layout.from_shapes([("w", (n,))]), 1, 0, density, distribution=distribution,
                                stages=stages)])
    step = world.step([acc], 0)
    chosen = step.selections[0].tolist()
    threshold = world.sparsifiers[0].metrics()[keys.THRESHOLD]
    norm = float(torch.linalg.vector_norm(acc))
    if norm == 0:
        assert chosen == [] and math.isnan(threshold)
    else:
        x = acc.abs() / norm
        threshold32 = torch.tensor(threshold, dtype=torch.float64).float()
        assert chosen == torch.nonzero(x > threshold32).view(-1).tolist()
    sent = torch.zeros(n)
    sent[chosen] = acc[chosen]
    assert torch.equal(sent + step.residuals[0], acc)
    assert torch.equal(step.residuals[0][chosen], torch.zeros(len(chosen)))


# -- adaptive stages -------------------------------------------------------------------------------
def feed(sparsifier: SIDCo, count: int, times: int = 5) -> None:
    for t in range(times):
        sparsifier.observe(Feedback(t, torch.tensor([count]), count))


def test_mode_minus_one_moves_one_stage_after_five_calls():
    sparsifier = one(1000, 0.01, stages=-1)  # d N = 10; max stages ceil(ln 0.01 / ln 0.5) = 7
    assert sparsifier.max_stages == 7
    feed(sparsifier, 2, times=4)  # est 0.2 < 0.8, but only 4 calls
    assert sparsifier._cur_stages == 1
    feed(sparsifier, 2, times=1)
    assert sparsifier._cur_stages == 2
    sparsifier.select(torch.randn(1000, generator=torch.Generator().manual_seed(0)), 5)
    assert sparsifier.metrics()[keys.STAGES] == 2  # the next selection runs two stages
    feed(sparsifier, 10)  # est 1.0: in the band, no change
    assert sparsifier._cur_stages == 2
    feed(sparsifier, 13)  # est 1.3 > 1.2: one fewer
    assert sparsifier._cur_stages == 1
    feed(sparsifier, 100)  # clamped at 1
    assert sparsifier._cur_stages == 1
    for _ in range(10):
        feed(sparsifier, 0)
    assert sparsifier._cur_stages == 7  # clamped at ceil(ln d / ln 0.5)


def test_mode_minus_two_flips_when_the_estimate_gets_worse():
    sparsifier = one(1000, 0.01, stages=-2)
    feed(sparsifier, 1)  # est 0.1, no last estimate: +1
    assert sparsifier._cur_stages == 2
    feed(sparsifier, 0)  # est 0.0 is worse than 0.1: flip, then est < 0.8: stages += -1
    assert sparsifier._cur_stages == 1
    feed(sparsifier, 5)  # est 0.5 is better: keep -1, est < 0.8: -1, clamped to 1
    assert sparsifier._cur_stages == 1 and sparsifier._direction == -1


def test_mode_minus_three_keeps_its_direction_only_while_returning_to_the_band():
    sparsifier = one(1000, 0.01, stages=-3)
    feed(sparsifier, 1)  # est 0.1: +1
    feed(sparsifier, 5)  # 0.5 > 0.1 and 0.1 < 0.8: moving back toward 1: keep, +1
    assert sparsifier._cur_stages == 3 and sparsifier._direction == 1
    feed(sparsifier, 3)  # 0.3 < 0.5: not moving back: flip, est < 0.8: stages += -1
    assert sparsifier._cur_stages == 2 and sparsifier._direction == -1
    feed(sparsifier, 9)  # est 0.9 in the band; 0.9 > 0.3 with 0.3 < 0.8: keep
    assert sparsifier._cur_stages == 2 and sparsifier._direction == -1


@pytest.mark.parametrize("mode,direction", [(-2, 1), (-3, -1)])
def test_modes_two_and_three_differ_inside_the_band(mode, direction):
    # est 0.9, then 0.95 (d N = 20): closer to 1, so -2 keeps its direction; -3 flips it, since
    # the last estimate was inside the band (not returning to it from outside).
    sparsifier = one(2000, 0.01, stages=mode)
    feed(sparsifier, 18)
    feed(sparsifier, 19)
    assert sparsifier._direction == direction and sparsifier._cur_stages == 1


def test_adaptive_state_resumes_exactly():
    assert_resume_is_exact(lambda r: SIDCo(LAYOUT, 2, r, 0.01, distribution="gpareto", stages=-2), 2,
                           drifting_stream(LAYOUT.numel, 2, seed=5), warm_steps=13, later_steps=12)


# -- a plain float64 reimplementation through the production step ---------------------------------
def reference_threshold(x: np.ndarray, density: float, distribution: str, stages: int, i_ratio: float) -> float:
    """Steps 3 and 4 of docs/algorithms.md "sidco", in float64, with the same edge rules."""
    def gpd(m, v, q):
        r = m * m / v
        sigma, c = 0.5 * m * (r + 1), 0.5 * (r - 1)
        return sigma * (1 - q ** c) / c

    q1 = density if stages == 1 or density >= 0.25 else 0.25
    if distribution == "exp":
        th = -x.mean() * math.log(q1)
    elif distribution == "gpareto":
        th = gpd(x.mean(), x.var(ddof=1), q1)
    else:
        s = math.log(x.mean()) - np.log(x + 2.220446049250313e-16).mean()
        a = (3 - s + math.sqrt((s - 3) ** 2 + 24 * s)) / (12 * s)
        th = x.mean() / a * float(gammaincinv(a, 1 - q1))
    ratio = density / 0.25
    if stages > 1:
        rho, rounds = ratio ** (1 / (stages - 1)), stages - 1
    elif stages == 0:
        rho, rounds = i_ratio, max(0, math.ceil(math.log(ratio) / math.log(i_ratio)))
    else:
        rounds = 0
    survivors = x
    for i in range(rounds, 0, -1):
        survivors = survivors[survivors > th]
        if len(survivors) < 2 or survivors.min() == survivors.max():
            break
        q = ratio / rho ** (rounds - 1) if (i == 1 and stages == 0) else rho
        t_min = survivors.min()
        y = survivors - t_min
        th = t_min - y.mean() * math.log(q) if distribution == "exp" else t_min + gpd(y.mean(), y.var(ddof=1), q)
    return float(th)


@pytest.mark.parametrize("distribution,stages,i_ratio", [("exp", 1, None), ("gpareto", 1, None), ("gamma", 1, None),
                                                          ("exp", 3, None), ("gpareto", 2, None), ("gamma", 0, None),
                                                          ("exp", 0, 0.5)])
def test_matches_the_reference_for_30_steps(distribution, stages, i_ratio):
    # x is float32 on both sides (|acc| / ||acc||, as the released code computes it); the
    # implementation's statistics are float32 reductions, the reference's float64, so thresholds
    # agree to 1e-5 and selections except for elements within that distance.
    density, world_size = 0.01, 3
    world = SteppedRanks([SIDCo(LAYOUT, world_size, r, density, distribution=distribution, stages=stages,
                                i_ratio=i_ratio) for r in range(world_size)])
    stream = drifting_stream(LAYOUT.numel, world_size, seed=11)
    rho = world.sparsifiers[0].i_ratio
    for t in range(30):
        step = world.step(next(stream), t)
        for sparsifier, acc, selection in zip(world.sparsifiers, step.accs, step.selections):
            x32 = acc.abs() / torch.linalg.vector_norm(acc)
            x = x32.double().numpy()
            th = reference_threshold(x, density, distribution, stages, rho)
            assert sparsifier.metrics()[keys.THRESHOLD] == pytest.approx(th, rel=1e-5)
            expected = set(np.nonzero(x > th)[0].tolist())
            for index in expected.symmetric_difference(selection.tolist()):
                assert abs(x[index] - th) <= 1e-5 * th
        # sparse_allgather: every rank zeroes only its own selection; the aggregate is the mean.
        for acc, selection, residual in zip(step.accs, step.selections, step.residuals):
            kept = acc.clone()
            kept[selection] = 0
            assert torch.equal(residual, kept)  # error feedback: exactly acc without what was sent
        expected_aggregate = torch.zeros(LAYOUT.numel, dtype=torch.float64)
        for acc, selection in zip(step.accs, step.selections):
            expected_aggregate.index_add_(0, selection, acc[selection].double())
        torch.testing.assert_close(step.aggregate.double(), expected_aggregate / world_size, rtol=1e-6, atol=1e-7)


def test_density_is_near_the_target_on_laplacian_gradients():
    # The exponential fit is right for |x| exponential (Laplacian acc): one stage lands near d N.
    generator = torch.Generator().manual_seed(0)
    signs = torch.where(torch.rand(200_000, generator=generator) < 0.5, 1.0, -1.0)
    acc = torch.empty(200_000).exponential_(1.0, generator=generator) * signs
    count = one(200_000, 0.01).select(acc, 0).numel()
    assert 0.9 * 2000 < count < 1.1 * 2000


# -- cost, build, knobs ----------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["torch", "compiled"])
@pytest.mark.parametrize("distribution", ["exp", "gpareto", "gamma"])
def test_select_allocates_nothing_of_the_vector_size(distribution, backend):
    numel = 1_000_000
    sparsifier = SIDCo(Layout.from_shapes([("w", (numel,))]), 4, 1, 1e-4, distribution=distribution)
    generator = torch.Generator().manual_seed(0)
    accs = [torch.randn(numel, generator=generator) * 0.003 for _ in range(6)]
    with kernel_backend(backend):
        selected, allocated = measured_selects(sparsifier, accs)
    assert allocated.bytes < allocation_bound(selected, sparsifier.k), allocated
    assert allocated.numba_allocations == 0, allocated


def test_builds_from_the_real_config():
    overrides = {"density": 0.05, "error_feedback": False, "distribution": "gamma", "stages": -3, "i_ratio": 0.3}
    cfg = compose_job(["sparsifier=sidco", "seed=7", *(f"sparsifier.{key}={value}" for key, value in overrides.items()),
                       "dataset=synthetic", "model=mlp"])
    sparsifier = build_sparsifier(cfg, LAYOUT, rank=2)
    assert type(sparsifier) is SIDCo and sparsifier.name == "sidco" and sparsifier.rank == 2
    assert {key: getattr(sparsifier, key) for key in overrides} == overrides
    assert sparsifier.exchange is ExchangeKind.SPARSE_ALLGATHER
    described = sparsifier.describe()
    assert described["adaptive"] and described["first_ratio"] == 0.25 and described["update_iter"] == 5


def test_released_defaults():
    cfg = compose_job(["sparsifier=sidco", "dataset=synthetic", "model=mlp"])
    assert cfg.sparsifier.stages == 1 and cfg.sparsifier.distribution == "exp" and cfg.sparsifier.density == 0.01
    assert [one(100, 0.1, distribution=d).i_ratio for d in ("exp", "gpareto", "gamma")] == [0.2, 0.075, 0.1]


@pytest.mark.parametrize("knobs,message", [
    ({"density": 0.0}, r"sparsifier.density must be in \(0, 1\]"),
    ({"density": 0.1, "distribution": "normal"}, "sparsifier.distribution must be exp, gpareto or gamma, got normal"),
    ({"density": 0.1, "stages": -4}, "sparsifier.stages must be an integer >= -3"),
    ({"density": 0.1, "stages": 1.5}, "sparsifier.stages must be an integer >= -3"),
    ({"density": 0.1, "i_ratio": 0.0}, r"sparsifier.i_ratio must be in \(0, 1\)"),
    ({"density": 0.1, "i_ratio": 1.0}, r"sparsifier.i_ratio must be in \(0, 1\)"),
    ({"density": 0.1, "exchange": "union_allreduce"}, "sparsifier.exchange=union_allreduce is not supported"),
])
def test_bad_knobs_name_the_key(knobs, message):
    with pytest.raises(ConfigError, match=message):
        SIDCo(LAYOUT, 4, 0, **knobs)


def test_fixed_stages_keep_no_state():
    sparsifier = SIDCo(LAYOUT, 2, 0, 0.01)
    sparsifier.select(next(noise(LAYOUT.numel, 1, seed=0))[0], 0)
    assert sparsifier.state_dict() == {}


class _Divisions(TorchDispatchMode):
    """Records the divisor of every division, and every multiplication, of a tensor of `numel`
    elements as the dispatcher sees it: a divisor is a 0-dim tensor (a true division on every
    device) or a Python number (which CUDA turns into a multiplication by its reciprocal)."""

    def __init__(self, numel: int) -> None:
        super().__init__()
        self.numel, self.divisors, self.multiplications = numel, [], 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if isinstance(args[0], torch.Tensor) and args[0].numel() == self.numel:
            if func.overloadpacket in (torch.ops.aten.div, torch.ops.aten.div_):
                self.divisors.append(args[1])
            elif func.overloadpacket in (torch.ops.aten.mul, torch.ops.aten.mul_):
                self.multiplications += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("distribution", ["exp", "gpareto", "gamma"])
def test_the_normalisation_divides_by_the_norm_as_a_tensor(distribution):
    """Step 2 as released (`tensor.abs() / torch.norm(tensor)`): x = |acc| divided by the 0-dim
    norm tensor. Divided by the norm as a Python float, CUDA multiplies by the float's
    reciprocal and x is one ulp off in about a quarter of its elements (an H200, N = 262,144);
    on the CPU both are a true division, so this checks the divisor itself."""
    acc = torch.randn(3003, generator=torch.Generator().manual_seed(3))
    with _Divisions(acc.numel()) as recorded:
        one(3003, 0.01, distribution=distribution).select(acc, 0)
    [divisor] = recorded.divisors
    assert isinstance(divisor, torch.Tensor) and divisor.dim() == 0 and divisor.device == acc.device
    assert torch.equal(divisor, torch.linalg.vector_norm(acc)) and recorded.multiplications == 0


def test_the_shifted_buffer_follows_the_device():
    """A later round's buffer (survivors - t_min) is reallocated when the survivors' device
    changes, as when their size or dtype does. The meta device stands in for a GPU: the round
    gets as far as reading its statistics, which a meta tensor cannot give."""
    sidco = one(10, 0.1, distribution="gpareto", stages=2)
    sidco._round(torch.tensor([1.0, 2.0, 4.0]), 0.5)
    assert sidco._shifted.device.type == "cpu"
    with pytest.raises(RuntimeError, match="item\\(\\) cannot be called on meta tensors"):
        sidco._round(torch.tensor([1.0, 2.0, 4.0], device="meta"), 0.5)
    assert sidco._shifted.device.type == "meta" and sidco._shifted.numel() >= 3
