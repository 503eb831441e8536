"""The batched (GPU) paths of issues #36 and #48 against the per-unit loops they replace, on CPU
tensors (`simulated_gpu` makes them take the GPU's choice): segmented top-k (two sorts) and classed
top-k (one torch.topk per class of lengths) against ExactTopK unit by unit on inputs with ties, zeros,
NaN and inf, units of one element, k_l = size and k_l = 0 refused; the unit norms
against linalg.vector_norm bit for bit; DEFT and Accordion through the production step, batched
beside the loop, selecting exactly the same indices in the same order; Random-k's device-free
generator against a plain Python splitmix64."""
from __future__ import annotations

import copy
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsifiers.accordion import Accordion
from sparsifiers.deft import DEFT
from sparsifiers.common.kernels import ExactTopK
from sparsifiers.common.kernels.backend import batched_path, simulated_gpu
from sparsifiers.common.kernels.classed_plan import classes
from sparsifiers.common.kernels.classed_topk import classed_topk, supports, unit_topk
from sparsifiers.common.kernels.segmented import ranges, segmented_topk, tiles, unit_norms
from sparsifiers.common.layout import Layout
from sparsifiers.randomk import GOLDEN, MASK64, RandomK, hashes, mix_int
from tests.helpers.compiled_calls import kernel_backend
from tests.helpers.stepped_ranks import SteppedRanks, gradients


@st.composite
def units_and_values(draw):
    n = draw(st.integers(1, 300))
    pool = draw(st.sampled_from(["ties", "zeros", "spread"]))
    if pool == "ties":
        values = draw(st.lists(st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5, -2.5]), min_size=n, max_size=n))
    elif pool == "zeros":
        values = draw(st.lists(st.sampled_from([0.0, -0.0, 3.0]), min_size=n, max_size=n))
    else:
        values = draw(st.lists(st.floats(-1e3, 1e3, width=32), min_size=n, max_size=n))
    x = torch.tensor(values, dtype=torch.float32)
    for special in draw(st.lists(st.sampled_from([math.nan, math.inf, -math.inf]), max_size=3)):
        x[draw(st.integers(0, n - 1))] = special
    cuts = sorted(set(draw(st.lists(st.integers(0, n), max_size=12))) | {0, n})
    units = [(a, b) for a, b in zip(cuts, cuts[1:])]
    chosen = draw(st.permutations(range(len(units))))[: draw(st.integers(1, len(units)))]
    ks = [draw(st.integers(1, units[u][1] - units[u][0])) for u in chosen]
    return x, [units[u][0] for u in chosen], [units[u][1] - units[u][0] for u in chosen], ks


def loop_topk(x: torch.Tensor, starts: list[int], lengths: list[int], ks: list[int]) -> torch.Tensor:
    """The reference: ExactTopK unit by unit, in the order given."""
    return torch.cat([ExactTopK()(x[s : s + n], k, offset=s).clone() for s, n, k in zip(starts, lengths, ks)])


@settings(max_examples=300, deadline=None)
@given(units_and_values(), st.sampled_from([torch.float32, torch.float16, torch.bfloat16]))
def test_segmented_and_classed_topk_are_exact_topk_unit_by_unit(case, dtype) -> None:
    x, starts, lengths, ks = case
    expected = loop_topk(x, starts, lengths, ks)
    assert torch.equal(segmented_topk(x, starts, lengths, ks), expected)
    assert torch.equal(classed_topk(x, starts, lengths, ks), expected)
    low = x.to(dtype)  # the magnitude bits of 16-bit floats, and their own ties and infinities
    assert torch.equal(classed_topk(low, starts, lengths, ks), loop_topk(low, starts, lengths, ks))
    assert torch.equal(ranges(starts, lengths, x.device), torch.cat([torch.arange(s, s + n) for s, n in zip(starts, lengths)]))


def test_segmented_topk_takes_whole_units_and_refuses_bad_k() -> None:
    x = torch.tensor([3.0, -1.0, 2.0, 5.0, 0.0])
    assert segmented_topk(x, [3, 0], [2, 3], [2, 3]).tolist() == [3, 4, 0, 1, 2]
    with pytest.raises(ValueError, match="1 <= k <= 2"):
        segmented_topk(x, [3], [2], [3])
    assert segmented_topk(x, [], [], []).numel() == 0
    assert classed_topk(x, [3, 0], [2, 3], [2, 3]).tolist() == [3, 4, 0, 1, 2]
    for k in (3, 0):  # k_l = 0 is refused as ExactTopK refuses it: a unit always selects something
        with pytest.raises(ValueError, match="1 <= k <= 2"):
            classed_topk(x, [3], [2], [k])
    assert classed_topk(x, [], [], []).numel() == 0


def test_classed_topk_pads_rows_and_ties_across_a_long_run() -> None:
    # Units of one class with different lengths (padding), the padded one at the end of x (its
    # padding runs past the end), and runs of equal magnitudes straddling each k_l-th: the lower
    # index wins, and no padding is ever taken.
    x = torch.tensor([1.0, -1.0, 1.0, 2.0, 1.0, -1.0, 1.0, 0.0, -0.0, 1.0, 1.0, 1.0, -1.0])
    starts, lengths, ks = [10, 0, 3, 7], [3, 3, 4, 2], [3, 2, 2, 1]
    assert classes(lengths) == [[0, 1, 2, 3]]  # one class, padded to 4
    assert classed_topk(x, starts, lengths, ks).tolist() == [10, 11, 12, 0, 1, 3, 4, 7]
    assert torch.equal(classed_topk(x, starts, lengths, ks), loop_topk(x, starts, lengths, ks))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_classed_topk_ranks_nan_as_inf_and_minus_zero_as_zero(dtype) -> None:
    # NaN's bits lie above inf's: unclamped, a NaN would outrank an inf of lower index.
    x = torch.tensor([0.0, math.inf, -math.nan, -math.inf, math.nan, -0.0, 0.0, 1.0], dtype=dtype)
    for k in range(1, 9):
        assert torch.equal(classed_topk(x, [0], [8], [k]), loop_topk(x, [0], [8], [k])), k
    assert classed_topk(x, [0], [8], [2]).tolist() == [1, 2]
    assert classed_topk(x, [4, 0], [4, 4], [3, 1]).tolist() == [4, 5, 7, 1]


def test_unit_topk_falls_back_to_the_sorts_where_the_keys_do_not_fit() -> None:
    x = torch.tensor([0.5, -2.0, 2.0, 1.0], dtype=torch.float64)
    assert not supports(x) and supports(x.float()) and supports(x.half())
    assert unit_topk(x, [0, 2], [2, 2], [1, 1]).tolist() == [1, 2]
    with pytest.raises(ValueError, match="float32, float16 or bfloat16"):
        classed_topk(x, [0], [4], [1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_unit_norms_are_vector_norms_bit_for_bit(dtype) -> None:
    generator = torch.Generator().manual_seed(3)
    sizes = [int(s) for s in torch.randint(1, 5000, (40,), generator=generator)]
    x = (torch.randn(sum(sizes), generator=generator) * torch.rand(sum(sizes), generator=generator) * 1e3).to(dtype)
    bounds = [0] + list(torch.tensor(sizes).cumsum(0).tolist())
    expected = torch.stack([torch.linalg.vector_norm(x[a:b]) for a, b in zip(bounds, bounds[1:])])
    assert torch.equal(unit_norms(x, sizes), expected)
    assert tiles(list(zip(bounds, bounds[1:])), sum(sizes)) and not tiles([(0, 2), (3, 4)], 4)


def test_batched_path_is_off_on_the_cpu_unless_simulated() -> None:
    x = torch.zeros(3)
    assert not batched_path(x)
    with simulated_gpu():
        assert batched_path(x)
    assert not batched_path(x)


SIZES = [2048, 32, 1, 128, 8, 300, 640, 1, 77]


def run_world(make, world_size: int, steps: int, batched: bool, grads_of) -> list:
    world = SteppedRanks([make(r) for r in range(world_size)])
    out = []
    for t in range(steps):
        grads = grads_of(t)
        if batched:
            with simulated_gpu():
                step = world.step(grads, t)
        else:
            step = world.step(grads, t)
        out.append((step.selections, step.residuals, step.aggregate, [s.metrics() for s in world.sparsifiers]))
    return out


def assert_same_runs(a: list, b: list) -> None:
    for (sel_a, res_a, agg_a, met_a), (sel_b, res_b, agg_b, met_b) in zip(a, b):
        assert [s.tolist() for s in sel_a] == [s.tolist() for s in sel_b]
        assert all(torch.equal(x, y) for x, y in zip(res_a, res_b)) and torch.equal(agg_a, agg_b)
        assert met_a == met_b


@pytest.mark.parametrize("backend", ["torch", "compiled"])
@pytest.mark.parametrize("world_size,norms,common", [(1, "local", "released"), (2, "local", "leader"),
                                                      (4, "global", "released"), (4, "local", "leader")])
def test_deft_batched_selects_exactly_what_the_loop_does(backend, world_size, norms, common) -> None:
    layout = Layout.from_shapes((f"p{i}", (s,)) for i, s in enumerate(SIZES))
    density = 0.05

    def make(rank):
        return DEFT(layout, world_size, rank, density, norms=norms, common_units=common, log_units_every=1)

    def grads_of(t):
        grads = gradients(SIZES, world_size, t, seed=5)
        for g in grads:  # ties at the cut-offs: whole runs of equal magnitudes, and zeros
            g[100:400] = 0.5 * torch.sign(g[100:400])
            g[2100:2150] = 0.0
        return grads

    with kernel_backend(backend):
        loop = run_world(make, world_size, 6, False, grads_of)
        batched = run_world(make, world_size, 6, True, grads_of)
    assert_same_runs(loop, batched)
    # The raw selection, order included (units in the bin's order), on one acc.
    acc = grads_of(9)[0]
    loop_rank, batched_rank = make(0), make(0)
    for sparsifier in (loop_rank, batched_rank):
        if norms == "global":
            sparsifier.receive_average(sparsifier._local_norms(acc), 9 * world_size)
    step = 9 * world_size  # rank 0 leads
    expected = loop_rank.select(acc, step, loop_rank.make_plan(acc, step)).clone()
    with simulated_gpu():
        got = batched_rank.select(acc, step, batched_rank.make_plan(acc, step))
        shared = batched_rank.shared_indices(step)
    assert torch.equal(got, expected)
    reference_shared = loop_rank.shared_indices(step)
    assert (shared is None) == (reference_shared is None)
    assert shared is None or torch.equal(shared, reference_shared)


@pytest.mark.parametrize("backend", ["torch", "compiled"])
def test_accordion_batched_selects_exactly_what_the_loop_does(backend) -> None:
    layout = Layout.from_shapes([("a", (2, 5)), ("b", (3,)), ("c", (40, 5)), ("d", (1,)), ("e", (64,))])
    sizes = [10, 3, 200, 1, 64]

    def make(rank):
        sparsifier = Accordion(layout, 2, rank, k_low=0.1, k_high=0.5)
        sparsifier.start_epoch(0, 3)
        return sparsifier

    def grads_of(t):
        grads = gradients(sizes, 2, t, seed=1)
        grads[0][20:60] = 1.0
        return grads

    with kernel_backend(backend):
        assert_same_runs(run_world(make, 2, 5, False, grads_of), run_world(make, 2, 5, True, grads_of))


def test_randomk_generator_is_splitmix64_and_identical_across_instances() -> None:
    key = 0xDEADBEEF12345
    assert [v & MASK64 for v in hashes(key, 6, torch.device("cpu")).tolist()] == [
        mix_int(key + (i + 1) * GOLDEN) for i in range(6)]
    assert mix_int(0) == 0 and mix_int(1) == 0x5692161D100B05E5  # splitmix64's published finalizer
    layout = Layout.from_shapes([("w", (100_000,))])
    first, second = RandomK(layout, 2, 0, 0.01, seed=7), RandomK(layout, 2, 1, 0.01, seed=7)
    for t in range(5):
        a, b = first.select(torch.zeros(1), t), second.select(torch.zeros(1), t)
        assert torch.equal(a, b) and torch.unique(a).numel() == a.numel() == first.k
        assert bool((a[1:] > a[:-1]).all()) and 0 <= int(a[0]) and int(a[-1]) < 100_000
        with simulated_gpu():  # nothing to batch: the draw is the same on every path
            assert torch.equal(first.select(torch.zeros(1), t), a)
