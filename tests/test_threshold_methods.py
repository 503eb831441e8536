"""The whole-vector threshold baselines (hard threshold, SAGE, Gaussian-k) and Random-k against
plain reimplementations of docs/algorithms.md, plus what the methods of this family share: threshold
comparisons as released (or exact) at the float32 neighbours of lambda, allocation-free
selection, configuration through the real config."""
from __future__ import annotations

import copy
import math
from statistics import NormalDist

import numpy as np
import pytest
import torch

from experiments.engine.rank.build import build_sparsifier
from experiments.engine.launcher.compose import compose_job
from experiments.runformat.errors import ConfigError
from experiments.engine.launcher.validate import validate
from sparsifiers.common.exchange_kinds import ExchangeKind
from sparsifiers.exdyna import ExDyna
from sparsifiers.gaussiank import GaussianK
from sparsifiers.common.layout import Layout
from sparsifiers.micro import Micro
from sparsifiers.randomk import RandomK
from sparsifiers.sage import Sage, sample_seed
from sparsifiers.threshold import HardThreshold
from sparsifiers.common.threshold_control import ThresholdScan, exact_cutoff, initial_threshold
from tests.helpers.allocation_meter import Allocations, measure
from tests.helpers.compiled_calls import kernel_backend
from tests.helpers.stepped_ranks import SteppedRanks, float32_nearest, inject_ties, noise, passes, ties

SMALL = ["dataset=synthetic", "dataset.num_train=64", "dataset.num_test=16", "model=mlp", "model.hidden=16"]
LAYOUT = Layout.from_shapes([("a", (40, 50)), ("b", (1000,)), ("c", (3,))])  # N = 3003


def drifting_stream(numel: int, world_size: int, seed: int):
    """Gradients whose scale drifts over a factor of 2.25, so adaptive thresholds keep moving."""
    for t, grads in enumerate(noise(numel, world_size, seed)):
        scale = 0.01 * 1.5 ** math.sin(t / 5)
        yield [grad * scale for grad in grads]


def zero_union(accs: list[np.ndarray], selections: list[list[int]]) -> list[np.ndarray]:
    """union_allreduce's residual rule: every rank zeroes every aggregated coordinate."""
    union = sorted(set().union(*selections))
    for acc in accs:
        acc[union] = 0
    return accs


# -- hard threshold -------------------------------------------------------------------------------
@pytest.mark.parametrize("world_size,threshold,comparison", [(4, None, "released"), (2, 0.02, "released"),
                                                              (2, 0.02, "exact")])
def test_hard_threshold_matches_the_reference_for_60_steps(world_size, threshold, comparison):
    numel, density = LAYOUT.numel, 0.01
    world = SteppedRanks([HardThreshold(LAYOUT, world_size, r, density, threshold=threshold, comparison=comparison)
                          for r in range(world_size)])
    # Reference: lambda fixed, by default 1 / (2 sqrt(k)); select |acc| >= lambda everywhere
    # (released: lambda rounded to the nearest float32; both lambdas here round down).
    lam = threshold if threshold is not None else 1 / (2 * math.sqrt(math.floor(density * numel)))
    assert float32_nearest(lam) < lam
    residuals = [np.zeros(numel, dtype=np.float32) for _ in range(world_size)]
    stream = drifting_stream(numel, world_size, seed=1)
    tie_positions = np.random.default_rng(world_size)
    overlaps = rule_mattered = 0
    for t in range(60):
        grads = next(stream)
        inject_ties(grads, residuals, lam, tie_positions)  # elements at the cutoff
        accs = [residual + grad.numpy() for residual, grad in zip(residuals, grads)]
        expected = [[i for i, v in enumerate(acc.tolist()) if passes(abs(v), lam, comparison)] for acc in accs]
        rule_mattered += sum(passes(abs(v), lam, "released") != passes(abs(v), lam, "exact")
                             for acc in accs for v in acc.tolist())
        residuals = zero_union(accs, expected)
        step = world.step(grads, t)
        assert [s.tolist() for s in step.selections] == expected, f"step {t}"
        assert all(s.metrics()["sparsifier/threshold"] == lam for s in world.sparsifiers)
        assert all(np.array_equal(a.numpy(), b) for a, b in zip(step.residuals, residuals))
        overlaps += sum(map(len, expected)) - step.aggregated
    assert overlaps > 0 or world_size == 1  # ranks select over the same vector: build-up
    assert rule_mattered > 0  # the two comparisons disagreed on some element: the replay tells them apart


# -- SAGE -----------------------------------------------------------------------------------------
class ReferenceSage:
    """One rank of SAGE as docs/algorithms.md states it. The random sample's indices come from the same
    generator and draw as the implementation's (its documented contract); the rest is plain."""

    def __init__(self, numel: int, density: float, rank: int, seed: int, comparison: str = "released") -> None:
        self.numel, self.density, self.comparison = numel, density, comparison
        self.samples = int(numel / (1 + numel * 0.05 ** 2))  # Slovin's formula
        self.threshold = 1 / (2 * math.sqrt(math.floor(density * numel)))
        self.generator = torch.Generator().manual_seed(sample_seed(seed, rank))
        self.previous_mean: float | None = None

    def select(self, acc: list[float]) -> list[int]:
        sample = torch.randint(0, self.numel, (self.samples,), generator=self.generator).tolist()
        mean = math.fsum(abs(acc[i]) for i in sample) / self.samples
        if self.previous_mean is not None:
            alpha = mean / self.previous_mean
            d_exam = sum(1 for v in acc if passes(abs(v), self.threshold * alpha, self.comparison)) / self.numel
            beta = 2 / (1 + math.exp(self.density - d_exam))
            gamma = 0.95 if d_exam / self.density < 0.1 else 1.05 if d_exam / self.density > 10 else 1.0
            self.threshold = self.threshold * alpha * beta * gamma
        self.previous_mean = mean
        return [i for i, v in enumerate(acc) if passes(abs(v), self.threshold, self.comparison)]


@pytest.mark.parametrize("world_size,seed,comparison", [(4, 0, "released"), (2, 11, "released"), (2, 11, "exact")])
def test_sage_matches_the_reference_for_60_steps(world_size, seed, comparison):
    numel, density = LAYOUT.numel, 0.01
    world = SteppedRanks([Sage(LAYOUT, world_size, r, density, seed=seed, comparison=comparison)
                          for r in range(world_size)])
    references = [ReferenceSage(numel, density, r, seed, comparison) for r in range(world_size)]
    residuals = [np.zeros(numel, dtype=np.float32) for _ in range(world_size)]
    stream = drifting_stream(numel, world_size, seed=2)
    gammas = set()
    for t in range(60):
        grads = next(stream)
        accs = [residual + grad.numpy() for residual, grad in zip(residuals, grads)]
        expected = [ref.select(acc.tolist()) for ref, acc in zip(references, accs)]
        residuals = zero_union(accs, expected)
        step = world.step(grads, t)
        assert [s.tolist() for s in step.selections] == expected, f"step {t}"
        for sparsifier, ref in zip(world.sparsifiers, references):
            assert sparsifier.threshold == ref.threshold  # exactly: per rank, by definition
            gammas.add(sparsifier.metrics()["sparsifier/gamma"])
        assert all(np.array_equal(a.numpy(), b) for a, b in zip(step.residuals, residuals))
    assert len({s.threshold for s in world.sparsifiers}) == world_size  # each rank its own lambda
    assert len(gammas) >= 2  # the stream moved d_exam across a gamma band


def test_sage_state_round_trip_resumes_exactly():
    stream = drifting_stream(LAYOUT.numel, 1, seed=4)
    sage = Sage(LAYOUT, 2, 1, 0.01, seed=5)
    for t in range(5):
        sage.select(next(stream)[0], t)
    state = copy.deepcopy(sage.state_dict())
    later = [next(stream)[0] for _ in range(5)]
    expected = [sage.select(acc, 5 + i).tolist() for i, acc in enumerate(later)]
    resumed = Sage(LAYOUT, 2, 1, 0.01, seed=5)
    resumed.load_state_dict(state)
    assert resumed.state_dict()["threshold"] == state["threshold"]
    assert torch.equal(resumed.state_dict()["generator"], state["generator"])
    assert [resumed.select(acc, 5 + i).tolist() for i, acc in enumerate(later)] == expected


# -- Gaussian-k ---------------------------------------------------------------------------------
def reference_gaussiank(acc: np.ndarray, density: float, max_scans: int) -> tuple[float, int]:
    """lambda = mean + std * Phi^-1(1 - d/2), in float64; halve below 2k/3, x1.5 above 4k/3."""
    k = math.floor(density * acc.size)
    values = acc.astype(np.float64)
    lam = float(values.mean()) + float(values.std(ddof=1)) * NormalDist().inv_cdf(1 - density / 2)
    magnitudes = np.abs(values)
    for scan in range(1, max_scans + 1):
        count = int((magnitudes >= lam).sum())
        if 2 * k / 3 <= count <= 4 * k / 3 or scan == max_scans:
            return lam, scan
        lam *= 0.5 if count < 2 * k / 3 else 1.5
    raise AssertionError("unreachable")


@pytest.mark.parametrize("world_size,max_scans", [(4, 3), (2, 5)])
def test_gaussiank_matches_the_reference_for_60_steps(world_size, max_scans):
    # The implementation fits in float32 (torch.std_mean, one pass, no copy) and the reference in
    # float64, so lambda agrees to 1e-5 and the selections agree except for elements within that
    # distance of lambda. The reference therefore reads the accumulators the real world produced.
    density = 0.01
    world = SteppedRanks([GaussianK(LAYOUT, world_size, r, density, max_scans=max_scans) for r in range(world_size)])
    stream = drifting_stream(LAYOUT.numel, world_size, seed=3)
    scans_seen = set()
    for t in range(60):
        step = world.step(next(stream), t)
        for sparsifier, acc, selection in zip(world.sparsifiers, step.accs, step.selections):
            lam, scans = reference_gaussiank(acc.numpy(), density, max_scans)
            metrics = sparsifier.metrics()
            assert metrics["sparsifier/threshold"] == pytest.approx(lam, rel=1e-5)
            assert metrics["sparsifier/scans"] == scans
            scans_seen.add(scans)
            magnitudes = acc.abs().double()
            expected = set(torch.nonzero(magnitudes >= lam).view(-1).tolist())
            for index in expected.symmetric_difference(selection.tolist()):
                assert abs(float(magnitudes[index]) - lam) <= 1e-5 * abs(lam)
    assert len(scans_seen) >= 2  # the refinement both stopped early and ran on


# -- Random-k -------------------------------------------------------------------------------------
@pytest.mark.parametrize("density", [0.01, 0.7, 1.0])  # sparse draw, permutation draw, everything
def test_randomk_draws_k_distinct_indices_identical_on_every_rank(density):
    world = SteppedRanks([RandomK(LAYOUT, 4, r, density, seed=9) for r in range(4)])
    assert world.sparsifiers[0].exchange is ExchangeKind.SHARED_ALLREDUCE
    k = math.floor(density * LAYOUT.numel)
    stream = noise(LAYOUT.numel, 4, seed=0)
    draws = []
    for t in range(8):
        step = world.step(next(stream), t)
        first = step.selections[0]
        assert all(torch.equal(first, other) for other in step.selections[1:])
        assert first.numel() == k == step.aggregated and torch.unique(first).numel() == k
        assert 0 <= int(first[0]) and int(first[-1]) < LAYOUT.numel
        assert step.counts == [k] * 4
        for acc, residual, zeroed in zip(step.accs, step.residuals, step.zeroed):
            transmitted = torch.zeros_like(acc)
            transmitted[zeroed] = acc[zeroed]
            assert torch.equal(transmitted + residual, acc)
        draws.append(first.tolist())
    assert len({tuple(d) for d in draws}) == (1 if density == 1.0 else 8)


@pytest.mark.parametrize("numel,k", [(12, 4), (12, 9)])  # the sparse draw and the permutation draw
def test_randomk_every_pair_of_coordinates_is_equally_likely(numel, k):
    """A uniform k-subset holds each pair of coordinates with probability k(k-1) / (N(N-1)),
    whatever the implementation draws internally (the old replay reference restated its draw
    sizes): over T draws each pair's count is about Binomial, and Pearson's statistic over the
    N(N-1)/2 pairs stays within 5 standard deviations of its chi-square mean. A draw that
    favoured neighbours, or one end of the vector, fails it; so does one repeating a subset."""
    draws = 3000
    sparsifier = RandomK(Layout.from_shapes([("w", (numel,))]), 2, 0, k / numel + 1e-9, seed=11)
    assert sparsifier.k == k
    together = torch.zeros(numel, numel)
    for t in range(draws):
        chosen = sparsifier.select(torch.zeros(numel), t)
        mask = torch.zeros(numel)
        mask[chosen] = 1.0
        together += torch.outer(mask, mask)
    pairs = together[torch.triu_indices(numel, numel, 1).unbind()]
    expected = draws * k * (k - 1) / (numel * (numel - 1))
    cells = pairs.numel()
    pearson = float(((pairs - expected) ** 2 / expected).sum())
    assert pearson < (cells - 1) + 5 * math.sqrt(2 * (cells - 1))


@pytest.mark.parametrize("numel,density", [(200, 0.1), (30, 0.8)])
def test_randomk_every_coordinate_is_equally_likely(numel, density):
    # Reference: a uniform k-subset contains each coordinate with probability k / N, so over T
    # draws each count is Binomial(T, k/N). Pearson's statistic over N cells is then about
    # chi-square with N - 1 degrees of freedom; the bound is 5 standard deviations above its mean.
    draws = 400
    layout = Layout.from_shapes([("w", (numel,))])
    sparsifier = RandomK(layout, 2, 0, density, seed=1)
    counts = torch.zeros(numel)
    for t in range(draws):
        counts[sparsifier.select(torch.zeros(numel), t)] += 1
    expected = draws * sparsifier.k / numel
    pearson = float(((counts - expected) ** 2 / expected).sum())
    assert pearson < (numel - 1) + 5 * math.sqrt(2 * (numel - 1))


def test_randomk_leaves_the_training_rng_alone_and_resumes_exactly():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    sparsifier = RandomK(LAYOUT, 4, 2, 0.01, seed=3)
    for t in range(3):
        sparsifier.select(torch.zeros(LAYOUT.numel), t)
    assert torch.equal(torch.get_rng_state(), before)
    state = copy.deepcopy(sparsifier.state_dict())
    expected = [sparsifier.select(torch.zeros(LAYOUT.numel), 3 + t).tolist() for t in range(3)]
    resumed = RandomK(LAYOUT, 4, 0, 0.01, seed=3)
    resumed.load_state_dict(state)
    assert [resumed.select(torch.zeros(LAYOUT.numel), 3 + t).tolist() for t in range(3)] == expected
    other_seed = RandomK(LAYOUT, 4, 0, 0.01, seed=4)
    assert other_seed.select(torch.zeros(LAYOUT.numel), 0).tolist() != RandomK(LAYOUT, 4, 0, 0.01, seed=3).select(
        torch.zeros(LAYOUT.numel), 0).tolist()


# -- shared by the family -------------------------------------------------------------------------
def test_threshold_scan_compares_exactly_or_as_released():
    below = torch.tensor(0.1, dtype=torch.float32)  # the float32 nearest to 0.1
    lam = float(below) + 2.0 ** -30  # above it, but rounds back to it in float32
    assert bool(torch.ge(below, lam))  # torch rounds lambda to float32: the released comparison
    assert exact_cutoff(lam, torch.float32) > lam and exact_cutoff(float(below), torch.float32) == float(below)
    values = torch.tensor([float(below), -float(below), 0.2, -0.05])
    for scan in (ThresholdScan(), ThresholdScan(comparison="exact")):  # exact: the scan's own default
        assert scan.select(values, lam, 10).tolist() == [12]
        assert scan.select(values, float(below), 0).tolist() == [0, 1, 2]
    released = ThresholdScan(comparison="released")
    assert released.select(values, lam, 10).tolist() == [10, 11, 12]
    exact = ThresholdScan(comparison="exact")
    exact.load(values)
    assert released.count(lam) == 3 and exact.count(lam) == 1  # counting follows the same rule


# -- the four methods with a `comparison` knob, at the float32 neighbours of lambda --------------
def k_whose_lambda_rounds_down() -> int:
    """A k whose initial lambda = 1 / (2 sqrt(k)) is not a float32 and rounds *down* to nearest."""
    k = next(k for k in range(20, 200) if float32_nearest(initial_threshold(k)) < initial_threshold(k))
    assert float32_nearest(initial_threshold(k)) < initial_threshold(k)
    return k


def four(comparison: str, world_size: int, rank: int, numel: int, k: int):
    """MiCRO, ExDyna, hard threshold and SAGE with lambda = 1 / (2 sqrt(k)) at step 0."""
    layout = Layout.from_shapes([("w", (numel,))])
    density = (k + 0.5) / numel  # floor(density * N) = k
    knobs = {"comparison": comparison}
    made = {
        "micro": Micro(layout, world_size, rank, density, **knobs),
        "exdyna": ExDyna(layout, world_size, rank, density, blocks=8, block_align=1, **knobs),
        "threshold": HardThreshold(layout, world_size, rank, density, **knobs),
        "sage": Sage(layout, world_size, rank, density, **knobs),
    }
    assert all(sparsifier.k == k for sparsifier in made.values())
    return made


def scanned_range(sparsifier, step: int) -> tuple[int, int]:
    """The slice a sparsifier compares at `step`: its partition, or the whole vector."""
    if isinstance(sparsifier, Micro):
        return sparsifier.partition_of(step)
    if isinstance(sparsifier, ExDyna):
        return sparsifier.element_range((step + sparsifier.rank) % sparsifier.world_size)
    return 0, sparsifier.numel


@pytest.mark.parametrize("method", ["micro", "exdyna", "threshold", "sage"])
def test_elements_at_the_float32_neighbours_of_lambda(method):
    k = k_whose_lambda_rounds_down()
    lam = initial_threshold(k)
    nearest, minus_nearest, above, minus_above, below, minus_below = ties(lam)
    assert below < nearest < lam < above  # lambda rounds down: nearest is one ulp below it
    acc = torch.zeros(1000)
    acc[10:16] = torch.tensor([nearest, minus_nearest, above, minus_above, below, minus_below])
    released = four("released", 1, 0, 1000, k)[method].select(acc, 0).tolist()
    exact = four("exact", 1, 0, 1000, k)[method].select(acc, 0).tolist()
    assert released == [10, 11, 12, 13]  # |x| = float32(lambda) passes: lambda was rounded to it
    assert exact == [12, 13]  # in real numbers float32(lambda) < lambda


@pytest.mark.parametrize("method", ["micro", "exdyna", "threshold", "sage"])
@pytest.mark.parametrize("seed", [0, 1])
def test_released_selection_is_the_plain_torch_comparison(method, seed):
    """`acc.abs() >= lam`, lam a Python float, on random data with ties at the cutoff, over the
    slice the method compares (rank 1 of 4 at step 2; SAGE at step 0, before lambda moves)."""
    k = k_whose_lambda_rounds_down()
    lam = initial_threshold(k)
    generator = torch.Generator().manual_seed(seed)
    acc = torch.randn(1000, generator=generator) * lam
    positions = torch.randperm(1000, generator=generator)[:60]
    acc[positions] = torch.tensor(ties(lam) * 10)
    step = 0 if method == "sage" else 2
    sparsifier = four("released", 4, 1, 1000, k)[method]
    start, end = scanned_range(sparsifier, step)
    expected = (torch.nonzero(acc[start:end].abs() >= lam).view(-1) + start).tolist()
    assert sparsifier.select(acc, step).tolist() == expected
    # The exact rule selects the same but the elements at float32(lambda), one ulp below lambda.
    exact_selected = set(four("exact", 4, 1, 1000, k)[method].select(acc, step).tolist())
    dropped = set(expected) - exact_selected
    assert exact_selected <= set(expected) and dropped
    assert all(float(acc[i].abs()) == float32_nearest(lam) for i in dropped)


@pytest.mark.parametrize("comparison,d_exam", [("released", 1.0), ("exact", 0.0)])
def test_sage_counts_d_exam_with_the_same_comparison(comparison, d_exam):
    """Every |acc| equals float32(lambda), one ulp below lambda: the sample mean is the same at
    steps 0 and 1 (alpha = 1), so d_exam counts |acc| >= lambda, all or nothing by the rule."""
    k = k_whose_lambda_rounds_down()
    lam = initial_threshold(k)
    acc = torch.full((1000,), float32_nearest(lam))
    acc[::2] *= -1
    sage = four(comparison, 1, 0, 1000, k)["sage"]
    assert sage.select(acc, 0).numel() == (1000 if comparison == "released" else 0)
    sage.select(acc, 1)
    metrics = sage.metrics()
    assert metrics["sparsifier/alpha"] == 1.0 and metrics["sparsifier/d_exam"] == d_exam


@pytest.mark.parametrize("method", ["micro", "exdyna", "threshold", "sage"])
def test_comparison_is_a_described_validated_knob(method):
    cfg = compose_job([f"sparsifier={method}", "dataset=synthetic", "model=mlp"])
    assert cfg.sparsifier.comparison == "released"
    assert build_sparsifier(cfg, LAYOUT, rank=0).describe()["comparison"] == "released"
    cfg.sparsifier.comparison = "exact"
    assert build_sparsifier(cfg, LAYOUT, rank=0).describe()["comparison"] == "exact"
    cfg.sparsifier.comparison = "nearest"
    with pytest.raises(ConfigError, match="sparsifier.comparison must be released or exact, got nearest"):
        build_sparsifier(cfg, LAYOUT, rank=0)


SIX = [
    lambda layout: Micro(layout, 4, 1, 1e-4),
    lambda layout: ExDyna(layout, 4, 1, 1e-4),
    lambda layout: HardThreshold(layout, 4, 1, 1e-4),
    lambda layout: Sage(layout, 4, 1, 1e-4),
    lambda layout: GaussianK(layout, 4, 1, 1e-4),
    lambda layout: RandomK(layout, 4, 1, 1e-4),
]


def allocation_bound(selected: list[int], k: int) -> int:
    """A full-size temporary is >= 1 MB (a bool mask of 10^6). Allowed per select: 32 KiB of small
    tensors and Python objects and 128 bytes per selected index or unit of k (Random-k's draw
    makes a few k-sized temporaries)."""
    return sum(32 * 1024 + 128 * (count + k) for count in selected)


def measured_selects(sparsifier, accs: list[torch.Tensor]) -> tuple[list[int], Allocations]:
    for t in range(4):  # warm-up: the buffers are allocated (and numba compiled) here
        sparsifier.select(accs[t], t)
    return measure(lambda: [sparsifier.select(accs[t], t).numel() for t in (4, 5)])


def million_element_stream(make):
    numel = 1_000_000
    sparsifier = make(Layout.from_shapes([("w", (numel,))]))  # k = 100
    generator = torch.Generator().manual_seed(0)
    return sparsifier, [torch.randn(numel, generator=generator) * 0.003 for _ in range(6)]  # few |acc| >= lambda


@pytest.mark.parametrize("backend", ["torch", "compiled"])
@pytest.mark.parametrize("make", SIX, ids=["micro", "exdyna", "threshold", "sage", "gaussiank", "randomk"])
def test_select_allocates_nothing_of_the_vector_size(make, backend):
    """On both kernel paths: torch's allocator, numpy's (tracemalloc) and numba's runtime (the
    compiled kernels write into buffers their callers own: not one NRT allocation)."""
    sparsifier, accs = million_element_stream(make)
    with kernel_backend(backend):
        selected, allocated = measured_selects(sparsifier, accs)
    assert allocated.bytes < allocation_bound(selected, sparsifier.k), allocated
    assert allocated.numba_allocations == 0, allocated


def _select_at_least_with_a_mask(values, cut, offset, out):
    """compiled.select_at_least with the bug the meter must catch: a full-size temporary mask
    made inside the numba kernel (seen by neither the torch profiler nor tracemalloc)."""
    mask = np.abs(values) >= cut
    count = 0
    for i in range(mask.shape[0]):
        if mask[i]:
            if count < out.shape[0]:
                out[count] = i + offset
            count += 1
    return count


@pytest.mark.parametrize("leak", ["torch", "numpy", "numba"])
def test_a_leaky_select_exceeds_the_allocation_bound(leak, monkeypatch):
    """The positive control: the same measurement fails a select that makes one full-size
    temporary, whichever allocator makes it."""
    numba = pytest.importorskip("numba")
    from sparsifiers.common.kernels import compiled

    sparsifier, accs = million_element_stream(SIX[2])
    select = sparsifier.select

    def leaky_select(acc, step):
        (torch.abs(acc) if leak == "torch" else np.abs(acc.numpy())).max()
        return select(acc, step)

    if leak == "numba":
        monkeypatch.setattr(compiled, "select_at_least", numba.njit(_select_at_least_with_a_mask))
    else:
        monkeypatch.setattr(sparsifier, "select", leaky_select)
    with kernel_backend("compiled"):
        selected, allocated = measured_selects(sparsifier, accs)
    assert allocated.bytes >= allocation_bound(selected, sparsifier.k), allocated
    if leak == "numba":  # and NRT counted one mask per select, beyond the arguments' MemInfos
        assert allocated.numba_allocations == 2, allocated


@pytest.mark.parametrize("method,cls,knobs", [
    ("threshold", HardThreshold, {"threshold": 0.25, "comparison": "exact"}),
    ("sage", Sage, {"sample_error": 0.1, "comparison": "exact"}),
    ("gaussiank", GaussianK, {"max_scans": 5}),
    ("randomk", RandomK, {}),
])
def test_builds_from_the_real_config(method, cls, knobs):
    """Every knob set on the command line, to a value none of the class defaults have, reaches
    the built object: a knob the builder drops (the class default used) fails here."""
    overrides = {"density": 0.05, "error_feedback": False, **knobs}
    cfg = compose_job([f"sparsifier={method}", "seed=7", *(f"sparsifier.{key}={value}" for key, value in overrides.items()),
                       "dataset=synthetic", "model=mlp"])
    sparsifier = build_sparsifier(cfg, LAYOUT, rank=2)
    assert type(sparsifier) is cls and sparsifier.name == method and sparsifier.rank == 2
    assert (sparsifier.density, sparsifier.k, sparsifier.seed) == (0.05, 150, 7)  # k = floor(0.05 * 3003)
    assert {key: getattr(sparsifier, key) for key in overrides} == overrides
    assert sparsifier.exchange is cls.exchanges[0]
    if method == "sage":  # Slovin's s from e = 0.1, not from the default 0.05
        assert sparsifier.sample_size == int(3003 / (1 + 3003 * 0.01))
    if method == "randomk":  # the shared draw is seeded from the run's seed: the same as a direct build's
        direct = RandomK(LAYOUT, cfg.workers, 0, 0.05, seed=7)
        assert torch.equal(sparsifier.select(torch.zeros(3003), 0), direct.select(torch.zeros(3003), 0))


@pytest.mark.parametrize("cls,knobs,message", [
    (HardThreshold, {"density": 0.0}, r"sparsifier.density must be in \(0, 1\], got 0.0"),
    (HardThreshold, {"density": 0.1, "threshold": -1.0}, "sparsifier.threshold must be > 0, got -1.0"),
    (HardThreshold, {"density": 0.1, "threshold": 0}, "sparsifier.threshold must be > 0, got 0"),
    (Sage, {"density": 0.0}, r"sparsifier.density must be in \(0, 1\]"),
    (Sage, {"density": 0.1, "sample_error": 0.0}, r"sparsifier.sample_error must be in \(0, 1\), got 0.0"),
    (GaussianK, {"density": 0.0}, r"sparsifier.density must be in \(0, 1\]"),
    (GaussianK, {"density": 0.1, "max_scans": 0}, "sparsifier.max_scans must be an integer >= 1, got 0"),
    (RandomK, {"density": 0.0}, r"sparsifier.density must be in \(0, 1\]"),
    (RandomK, {"density": 0.1, "exchange": "union_allreduce"}, "sparsifier.exchange=union_allreduce is not supported"),
])
def test_bad_knobs_name_the_key(cls, knobs, message):
    with pytest.raises(ConfigError, match=message):
        cls(LAYOUT, 4, 0, **knobs)


def test_bad_threshold_fails_validation_before_launch():
    with pytest.raises(ConfigError, match="sparsifier.threshold must be > 0, got -1"):
        validate(compose_job(["sparsifier=threshold", "sparsifier.threshold=-1", *SMALL]))
