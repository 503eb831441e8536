"""Top-k selection against a plain reference."""
from __future__ import annotations

import torch
from hypothesis import given, settings, strategies as st

from sparsifiers.common.layout import Layout
from sparsifiers.topk import TopK


def reference_topk(acc: torch.Tensor, k: int) -> set[int]:
    """The k largest |acc|, by sorting every element (ties cannot occur with random floats)."""
    order = sorted(range(acc.numel()), key=lambda i: -abs(float(acc[i])))
    return set(order[:k])


@settings(max_examples=40, deadline=None)
@given(numel=st.integers(10, 3000), density=st.floats(0.001, 1.0), seed=st.integers(0, 2**16))
def test_topk_selects_the_k_largest_magnitudes(numel, density, seed):
    layout = Layout.from_shapes([("w", (numel,))])
    acc = torch.randn(numel, generator=torch.Generator().manual_seed(seed))
    k = int(density * numel)
    if k < 1:
        return
    sparsifier = TopK(layout, world_size=4, rank=0, density=density)
    assert sparsifier.k == k
    selection = sparsifier.select(acc, step=0)
    assert selection.dtype == torch.int64 and selection.numel() == k
    assert set(selection.tolist()) == reference_topk(acc, k)


def test_topk_reuses_its_buffers_across_steps():
    layout = Layout.from_shapes([("a", (50, 4)), ("b", (30,))])
    sparsifier = TopK(layout, world_size=2, rank=1, density=0.1)
    first = sparsifier.select(torch.randn(230), step=0)
    pointer = first.data_ptr()
    second = sparsifier.select(torch.randn(230), step=1)
    assert second.data_ptr() == pointer  # no new allocation on the hot path
