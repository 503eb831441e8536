"""classed_topk's host plan (sparsifiers/common/kernels/classed_plan.py, issue #48): the classes
are the cheapest contiguous grouping of the sorted distinct lengths under the selection model's
constants (checked against every grouping), the answer stays exact whatever the grouping (one
class, one per length), and the per-layout cache saves the layout's operations without growing
past its bound."""
from __future__ import annotations

import itertools
import random

import pytest
import torch
from hypothesis import given, settings

from experiments.studies.benchmarks.op_counts import count_ops
from sparsifiers.common.kernels import classed_plan
from sparsifiers.common.kernels.classed_plan import (CACHED_PER_ELEMENT, JOIN_OPS, KEY_BYTES, OPS_PER_CLASS, classes,
                                                     row_layout)
from sparsifiers.common.kernels.classed_topk import classed_topk
from tests.test_segmented import loop_topk, units_and_values


def modelled_us(lengths: list[int], grouped: list[list[int]]) -> float:
    """The model's cost of a grouping, as classes() weighs it: operations and padded ranked bytes."""
    launch_us, us_per_byte = classed_plan._costs()
    padded = sum(len(units) * max(lengths[u] for u in units) for units in grouped)
    joined = (JOIN_OPS * len(grouped) + 1) if len(grouped) > 1 else 0  # a view per class and the cat
    return (OPS_PER_CLASS * len(grouped) + joined) * launch_us + padded * KEY_BYTES * us_per_byte


def contiguous_groupings(lengths: list[int]):
    """Every grouping of the sorted distinct lengths into contiguous runs."""
    distinct = sorted(set(lengths))
    for cuts in itertools.chain.from_iterable(itertools.combinations(range(1, len(distinct)), r)
                                              for r in range(len(distinct))):
        bounds = list(zip((0, *cuts), (*cuts, len(distinct))))
        yield [[u for u, n in enumerate(lengths) if distinct[i] <= n <= distinct[j - 1]] for i, j in bounds]


def test_classes_are_the_cheapest_contiguous_grouping() -> None:
    rng = random.Random(48)
    for _ in range(200):
        lengths = [rng.choice([1, 10, 3000, 60000, 2 ** 17, 2 ** 19, 2 ** 20, 2 ** 21, 2 ** 22])
                   + rng.randrange(3) for _ in range(rng.randint(1, 9))]
        chosen = classes(lengths)
        assert sorted(u for units in chosen for u in units) == list(range(len(lengths)))
        best = min(modelled_us(lengths, grouped) for grouped in contiguous_groupings(lengths))
        assert modelled_us(lengths, chosen) == pytest.approx(best), lengths


def test_resnet18_shapes_group_into_few_classes() -> None:
    from tests.helpers.op_layouts import resnet18_shapes

    lengths = [torch.Size(shape).numel() for shape in resnet18_shapes()]
    grouped = classes(lengths)
    assert 2 <= len(grouped) <= 6 < len(set(lengths))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("grouping", ["one class", "one class per length"])
@settings(max_examples=100, deadline=None)
@given(case=units_and_values())
def test_classed_topk_is_exact_whatever_the_grouping(grouping, dtype, case) -> None:
    # The model's constants bent to the two extremes: every grouping must select the same.
    x, starts, lengths, ks = case
    x = x.to(dtype)
    with pytest.MonkeyPatch.context() as patch:
        costs = (1e9, 1e-12) if grouping == "one class" else (1e-12, 1e9)
        patch.setattr(classed_plan, "_costs", lambda: costs)
        patch.setattr(classed_plan, "_CACHE", type(classed_plan._CACHE)())
        assert len(classes(lengths)) == (1 if grouping == "one class" else len(set(lengths)))
        assert torch.equal(classed_topk(x, starts, lengths, ks), loop_topk(x, starts, lengths, ks))


def test_a_cached_layout_saves_its_operations_and_the_cache_stays_bounded(monkeypatch) -> None:
    monkeypatch.setattr(classed_plan, "_CACHE", type(classed_plan._CACHE)())
    x = torch.randn(4000)
    starts, lengths, ks = [100, 0, 2000], [900, 50, 1500], [5, 50, 7]

    def counted() -> tuple[torch.Tensor, int]:
        with count_ops() as counts:
            got = classed_topk(x, starts, lengths, ks)
        return got, counts.ops

    (first, built), (second, cached) = counted(), counted()
    assert torch.equal(first, second) and torch.equal(first, loop_topk(x, starts, lengths, ks))
    assert built - cached >= 6
    assert row_layout(x, starts, lengths) is row_layout(x, starts, lengths)
    for start in range(0, 3000, 10):  # 300 layouts of 1,000 slots: far past the bound
        row_layout(x, [start], [1000])
    assert sum(layout.slots for layout in classed_plan._CACHE.values()) <= CACHED_PER_ELEMENT * x.numel()
    assert len(classed_plan._CACHE) == CACHED_PER_ELEMENT * x.numel() // 1000  # the most recent ones


def test_a_rank_cycling_through_its_bins_builds_each_once(monkeypatch) -> None:
    # DEFT's bin for a rank recurs every W steps: W layouts of 1.95 slots per element in all (W = 64
    # at ResNet-18, the most measured) stay cached, where least-recently-used eviction under a
    # smaller bound would rebuild every one of them every cycle.
    monkeypatch.setattr(classed_plan, "_CACHE", type(classed_plan._CACHE)())
    builds = []
    build = classed_plan._build
    monkeypatch.setattr(classed_plan, "_build", lambda *args: builds.append(1) or build(*args))
    x = torch.randn(64 * 100)
    bins = [([b * 100], [195]) for b in range(63)]  # 195 slots each where the bin holds 100 elements
    for _ in range(3):
        for starts, lengths in bins:
            row_layout(x, starts, lengths)
    assert len(builds) == len(bins)
