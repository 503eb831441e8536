"""Random-k's sparse draw without `torch.kthvalue` (issue 45 item 5): on a 1-D CUDA tensor it
runs as one thread block. Its replacement picks the same indices, bit for bit: the k-th
smallest is one value however it is found."""
from __future__ import annotations

import pytest
import torch

from experiments.engine.core.sync_count import SyncCounter
from experiments.studies.benchmarks.step import benchmark_layout, build_method
from sparsifiers import randomk

NUMEL = 50_000


def test_the_kth_smallest_is_kthvalues_with_ties():
    generator = torch.Generator().manual_seed(0)
    for trial in range(200):
        n = int(torch.randint(1, 400, (1,), generator=generator))
        values = torch.randint(0, max(2, n // 4), (n,), generator=generator)  # many ties
        k = int(torch.randint(1, n + 1, (1,), generator=generator))
        assert torch.equal(randomk.kth_smallest(values, k), torch.kthvalue(values, k).values), (trial, n, k)


@pytest.mark.parametrize("density", [0.001, 0.01, 0.2, 0.5])
def test_the_draw_chooses_what_kthvalue_chose(monkeypatch, density):
    def drawn(seed: int) -> list[torch.Tensor]:
        sparsifier = build_method("randomk", 4, density, benchmark_layout(NUMEL), 0)
        sparsifier._seed = randomk.shared_seed(seed)
        return [sparsifier.select(torch.randn(NUMEL), step) for step in range(5)]

    new = [drawn(seed) for seed in range(6)]
    monkeypatch.setattr(randomk, "kth_smallest", lambda values, k: torch.kthvalue(values, k).values)
    old = [drawn(seed) for seed in range(6)]
    assert all(torch.equal(a, b) for per_seed_new, per_seed_old in zip(new, old) for a, b in zip(per_seed_new, per_seed_old))


def test_a_select_calls_no_kthvalue():
    sparsifier = build_method("randomk", 4, 0.01, benchmark_layout(NUMEL), 0)
    with SyncCounter() as counter:
        sparsifier.select(torch.randn(NUMEL), 0)
    assert "aten.kthvalue" not in counter.op_names and "aten.topk" in counter.op_names, counter.op_names
