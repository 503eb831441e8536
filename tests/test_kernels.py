"""The compiled selection kernels return exactly what the torch reference returns, and both what
a brute-force definition returns: on random inputs and on adversarial ones (ties at the k-th
magnitude, all-equal vectors, a threshold equal to an element or one ulp from it, NaN and inf,
empty slices, a sample that misleads the top-k filter), and through the whole step of every
sparsifier (selections, aggregates, residuals, counts, method metrics) at W = 1, 2 and 4."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from experiments.engine.rank.build import build_sparsifier
from experiments.engine.launcher.compose import compose_job
from sparsifiers.common import kernels
from sparsifiers.common.kernels import AtLeastSelector, ExactTopK, count_at_least, sorted_union
from sparsifiers.common.kernels.threshold import count_at_least_reference, select_at_least_reference
from sparsifiers.common.kernels.topk import SAMPLE, exact_topk_reference, sample_size
from sparsifiers.common.kernels.union import sorted_union_reference
from sparsifiers.common.layout import Layout
from tests.helpers.compiled_calls import CompiledCalls
from tests.helpers.compiled_calls import kernel_backend as backend
from tests.helpers.harness import result_name
from tests.helpers.stepped_ranks import SteppedRanks, gradients

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not kernels.compiled_available(), reason="numba is not installed")


def brute_force_topk(values: torch.Tensor, k: int) -> list[int]:
    """The definition: order by magnitude (NaN as +inf) descending, then index ascending."""
    magnitudes = [math.inf if math.isnan(v) else abs(v) for v in values.tolist()]
    order = sorted(range(len(magnitudes)), key=lambda i: (-magnitudes[i], i))
    return sorted(order[:k])


def compiled_topk(values: torch.Tensor, k: int, offset: int = 0) -> torch.Tensor:
    with backend("compiled"):
        return ExactTopK()(values, k, offset).clone()


def adversarial_vectors(n: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(n)
    levels = torch.randint(-3, 4, (n,), generator=generator).to(dtype) * 0.25  # heavy ties
    special = torch.randn(n, generator=generator, dtype=dtype)
    special[:: max(1, n // 7)] = math.nan
    special[3 :: max(1, n // 5)] = math.inf
    special[5 :: max(1, n // 6)] = -math.inf
    return {
        "normal": torch.randn(n, generator=generator, dtype=dtype),
        "ties": levels,
        "all_equal": torch.full((n,), -0.5, dtype=dtype),
        "zeros_and_negative_zeros": torch.where(torch.arange(n) % 2 == 0, 0.0, -0.0).to(dtype),
        "nan_and_inf": special,
    }


# -- exact top-k ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [1, 7, 64, 1000, 3 * SAMPLE + 17])
def test_topk_paths_agree_with_the_definition(n: int, dtype: torch.dtype) -> None:
    for name, values in adversarial_vectors(n, dtype).items():
        for k in sorted({1, max(1, n // 1000), max(1, n // 10), max(1, n // 3), n}):
            expected = brute_force_topk(values, k)
            assert exact_topk_reference(values.clone(), k).tolist() == expected, (name, k)
            assert compiled_topk(values, k).tolist() == expected, (name, k)
            assert compiled_topk(values, k, offset=1000).tolist() == [i + 1000 for i in expected], (name, k)


def test_topk_reference_is_the_definition_on_a_large_vector() -> None:
    """The sampling filter runs on large inputs only: check it against the definition there."""
    generator = torch.Generator().manual_seed(1)
    values = (torch.randint(0, 50, (2 * SAMPLE + 5000,), generator=generator) * 0.1).float()  # ties
    k = 3000
    expected = brute_force_topk(values, k)
    assert compiled_topk(values, k).tolist() == expected
    assert exact_topk_reference(values, k).tolist() == expected


def test_topk_with_distinct_magnitudes_is_torch_topks_index_set() -> None:
    values = torch.randn(5 * SAMPLE, generator=torch.Generator().manual_seed(2))
    k = 400
    assert compiled_topk(values, k).tolist() == sorted(torch.topk(values.abs(), k).indices.tolist())


def test_topk_falls_back_when_the_sample_misleads_the_cut() -> None:
    """Large values exactly at the sampled positions and nowhere else: the sample's cut keeps only
    those, fewer than k; the filter must lower the cut until the answer is exact."""
    for n in (6 * SAMPLE, 300 * SAMPLE):
        m = sample_size(n)
        values = torch.rand(n, generator=torch.Generator().manual_seed(3)) * 1e-3
        stride = n // m
        values[stride // 2 :: stride][:m] = 10.0
        for k in (m + 100, 2 * m, n // 4 - 1):
            assert compiled_topk(values, k).tolist() == exact_topk_reference(values, k).tolist()


def test_topk_of_a_mostly_zero_vector_keeps_its_buffers_small() -> None:
    """A sampled cut of 0 (most magnitudes exactly 0, as in embedding gradients) must not take
    every element in as a candidate when the nonzeros alone hold the top-k."""
    n, k = 400_000, 400
    values = torch.zeros(n)
    values[torch.randperm(n, generator=torch.Generator().manual_seed(6))[: 4 * k]] = torch.rand(4 * k) + 0.1
    top = ExactTopK()
    with backend("compiled"):
        assert top(values, k).tolist() == brute_force_topk(values, k)
    assert top._positions.numel() < n // 10


def test_topk_buffers_grow_and_results_stay_exact_across_calls() -> None:
    top = ExactTopK()
    generator = torch.Generator().manual_seed(4)
    with backend("compiled"):
        for k, n in [(10, 100_000), (5000, 100_000), (3, 50), (20_000, 90_000)]:
            values = torch.randn(n, generator=generator)
            assert top(values, k).tolist() == exact_topk_reference(values, k).tolist()


def test_topk_rejects_k_outside_one_to_n() -> None:
    for k in (0, 11):
        with pytest.raises(ValueError, match="1 <= k <= 10"):
            ExactTopK()(torch.ones(10), k)


# -- threshold scans --------------------------------------------------------------------------------
def cuts_around(values: torch.Tensor) -> list[float]:
    """Cuts equal to an element's magnitude and one ulp either side of it, 0, and beyond the max."""
    finite = values[torch.isfinite(values)].abs()
    if finite.numel() == 0:
        return [0.0, 1.0, math.inf]
    element = finite[finite.numel() // 2]
    up = torch.nextafter(element, torch.tensor(math.inf, dtype=values.dtype))
    down = torch.nextafter(element, torch.tensor(0.0, dtype=values.dtype))
    middle = (float(element) + float(up)) / 2  # a float64 cut between two float32 values
    return [float(element), float(up), float(down), middle, 0.0, float(finite.max()) * 2, math.inf]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, 1000, 70_001])
def test_threshold_scan_paths_agree(n: int, dtype: torch.dtype) -> None:
    selector = AtLeastSelector()
    for name, values in adversarial_vectors(max(n, 1), dtype).items():
        values = values[:n]
        for cut in cuts_around(values):
            expected = select_at_least_reference(values, cut, 17).tolist()
            # The definition: |v| >= the cut rounded to the tensor's dtype (to nearest, as torch does).
            rounded = float(torch.tensor(cut, dtype=torch.float64).to(dtype))
            assert expected == [17 + i for i, v in enumerate(values.tolist()) if abs(v) >= rounded], (name, cut)
            with backend("compiled"):
                assert selector(values, cut, 17).tolist() == expected, (name, cut)
                assert count_at_least(values, cut) == len(expected) == count_at_least_reference(values, cut), (name, cut)


def test_threshold_scan_compares_in_the_tensors_dtype_like_torch() -> None:
    """A float64 cut between two float32 values is rounded to nearest as torch rounds it."""
    below = torch.tensor(0.1, dtype=torch.float32)
    above = torch.nextafter(below, torch.tensor(1.0))
    values = torch.stack([below, above, -below, -above])
    for fraction in (0.25, 0.5, 0.75):
        cut = float(below) + fraction * (float(above) - float(below))
        expected = torch.nonzero(values.abs() >= cut).view(-1).tolist()
        with backend("compiled"):
            assert AtLeastSelector()(values, cut, 0).tolist() == expected, fraction


def test_threshold_selection_buffer_grows() -> None:
    selector = AtLeastSelector()
    values = torch.randn(10_000, generator=torch.Generator().manual_seed(5))
    with backend("compiled"):
        for cut in (3.0, 0.0, 1.0, 0.0):
            assert selector(values, cut, 0).tolist() == select_at_least_reference(values, cut, 0).tolist()


# -- the union of the exchange ------------------------------------------------------------------------
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 8])
def test_union_paths_agree(world_size: int) -> None:
    generator = torch.Generator().manual_seed(world_size)
    numel = 5000
    cases = {
        "overlapping": [torch.randperm(numel, generator=generator)[: 50 + 300 * r] for r in range(world_size)],
        "disjoint": list(torch.randperm(numel, generator=generator)[: 200 * world_size].chunk(world_size)),
        "empty_rows": [torch.empty(0, dtype=torch.int64) if r % 2 else torch.arange(r, numel, 7) for r in range(world_size)],
        "all_empty": [torch.empty(0, dtype=torch.int64)] * world_size,
        "edges": [torch.tensor([0, numel - 1, 63, 64, 127, 128])] * world_size,
    }
    for name, selections in cases.items():
        counts = torch.tensor([s.numel() for s in selections])
        width = int(counts.max())
        rows = torch.full((world_size, width), -1, dtype=torch.int32)
        for r, s in enumerate(selections):
            rows[r, : s.numel()] = s.int()
        expected = sorted(set().union(*(set(s.tolist()) for s in selections)))
        assert sorted_union_reference(rows, counts).tolist() == expected, name
        with backend("compiled"):
            assert sorted_union(rows, counts, numel).tolist() == expected, name


# -- the knob -----------------------------------------------------------------------------------------
def test_backend_knob_names_its_key() -> None:
    with pytest.raises(ValueError, match="kernels must be auto, torch or compiled"):
        kernels.set_backend("fast")


def test_torch_backend_never_runs_a_compiled_kernel(monkeypatch) -> None:
    from sparsifiers.common.kernels import compiled

    def forbidden(*args):
        raise AssertionError("a compiled kernel ran under kernels=torch")

    for name in ("count_at_least", "select_at_least", "gather_candidates", "topk_at_cut", "sample_magnitudes",
                 "kth_largest", "top_of_candidates", "sorted_union"):
        monkeypatch.setattr(compiled, name, forbidden)
    values = torch.randn(100_000)
    with backend("torch"):
        ExactTopK()(values, 100)
        AtLeastSelector()(values, 2.0, 0)
        count_at_least(values, 2.0)
        sorted_union(torch.tensor([[1, 2], [2, 3]], dtype=torch.int32), torch.tensor([2, 2]), 10)


# -- the whole step of every sparsifier --------------------------------------------------------------
SIZES = [40_000, 24_000, 5_000, 700, 64, 10]
# Every method that calls a kernel, with the kernels its step must reach under kernels=auto (a
# method whose fast path is silently skipped runs the reference twice and compares equal). Not
# dense (it selects nothing) nor randomk (a seeded draw, no kernel: both paths run the same
# code, so comparing them would show nothing). DGC selects in torch; its exchange's union runs
# the compiled sorted_union.
TOPK_KERNELS = {"sample_magnitudes", "kth_largest", "topk_at_cut"}
KERNELS_OF = {
    "topk": TOPK_KERNELS | {"sorted_union"},
    "deft": TOPK_KERNELS | {"sorted_union"},
    "micro": {"select_at_least", "sorted_union"},
    "exdyna": {"select_at_least", "sorted_union"},
    "threshold": {"select_at_least", "sorted_union"},
    "sage": {"select_at_least", "count_at_least", "sorted_union"},
    "gaussiank": {"select_at_least", "count_at_least", "sorted_union"},
    "sidco": {"select_at_least"},  # sparse_allgather: no union
    "cltk": TOPK_KERNELS,
    "dgc": {"sorted_union"},
}
METHODS = list(KERNELS_OF)


def run_steps(method: str, world_size: int, grads_of_step, steps: int) -> list[dict]:
    layout = Layout.from_shapes((f"p{i}", (size,)) for i, size in enumerate(SIZES))
    cfg = compose_job([f"sparsifier={method}", f"workers={world_size}", "sparsifier.density=0.01",
                       "dataset=synthetic", "model=mlp"])
    world = SteppedRanks([build_sparsifier(cfg, layout, rank=r) for r in range(world_size)])
    history = []
    for t in range(steps):
        got = world.step(grads_of_step(t), t)
        history.append({
            "selections": [s.tolist() for s in got.selections],
            "aggregate": got.aggregate.clone(),
            "residuals": [r.clone() for r in got.residuals],
            "counts": got.counts,
            "aggregated": got.aggregated,
            "metrics": [s.metrics() for s in world.sparsifiers],
        })
    return history


def assert_same_history(reference: list[dict], fast: list[dict]) -> None:
    for t, (want, got) in enumerate(zip(reference, fast)):
        assert got["selections"] == want["selections"], t
        assert torch.equal(got["aggregate"], want["aggregate"]), t
        assert all(torch.equal(a, b) for a, b in zip(got["residuals"], want["residuals"])), t
        assert (got["counts"], got["aggregated"]) == (want["counts"], want["aggregated"]), t
        assert repr(got["metrics"]) == repr(want["metrics"]), t  # repr: NaN == NaN


@pytest.mark.parametrize("world_size", [1, 2, 4])
@pytest.mark.parametrize("method", METHODS)
def test_whole_step_is_the_same_on_both_paths(method: str, world_size: int) -> None:
    numel = sum(SIZES)

    def realistic(t):  # thresholds settle in a few steps at this scale
        return [g * 0.01 for g in gradients(SIZES, world_size, t)]

    def tied(t):  # a few magnitudes only: ties at every k-th value, every threshold hits elements
        generator = torch.Generator().manual_seed(t)
        return [torch.randint(-2, 3, (numel,), generator=generator).float() * 0.005 for _ in range(world_size)]

    for grads_of_step in (realistic, tied):
        with backend("torch"):
            reference = run_steps(method, world_size, grads_of_step, steps=6)
        with backend("auto"), CompiledCalls().watching() as spy:
            fast = run_steps(method, world_size, grads_of_step, steps=6)
        missing = KERNELS_OF[method] - set(spy.calls)
        assert not missing, f"{method} ran no {sorted(missing)} under kernels=auto ({grads_of_step.__name__})"
        assert_same_history(reference, fast)


# -- real processes: a run's results do not depend on the knob ---------------------------------------
REAL_METHODS = ["topk", "deft", "micro", "exdyna", "threshold", "sage", "cltk", "topk:exchange=sparse_allgather"]


def run_real(out: Path, kernels_backend: str) -> None:
    out.mkdir()
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--max-restarts=0",
               "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:0", str(REPO / "tests" / "helpers" / "harness.py"), str(out),
               f"kernels={kernels_backend}", "--workers", "2", "--methods", ",".join(REAL_METHODS), "--steps", "5"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]


@pytest.mark.slow
def test_real_gloo_runs_are_identical_on_both_paths(tmp_path):
    """Two gloo processes training for real: selections, counts, metrics, traffic and the final
    parameters of every rank are bit for bit the same under kernels=torch and kernels=compiled."""
    run_real(tmp_path / "torch", "torch")
    run_real(tmp_path / "compiled", "compiled")
    for spec in REAL_METHODS:
        for process in range(2):
            name = f"{result_name(spec)}.process{process}.pt"
            want, got = torch.load(tmp_path / "torch" / name), torch.load(tmp_path / "compiled" / name)
            assert (want["kernels"], got["kernels"]) == ("torch", "compiled")
            for step, (a, b) in enumerate(zip(want["selections"], got["selections"])):
                assert a.keys() == b.keys() and all(torch.equal(a[r], b[r]) for r in a), (spec, step)
            assert all(torch.equal(a, b) for a, b in zip(want["counts"], got["counts"])), spec
            assert want["aggregated"] == got["aggregated"], spec
            assert repr(want["metrics"]) == repr(got["metrics"]), spec
            assert repr(want["exchange"]) == repr(got["exchange"]), spec
            assert torch.equal(want["params"], got["params"]), spec


def test_warm_up_runs_only_where_the_compiled_path_would() -> None:
    with backend("torch"):
        assert not kernels.warm_up()
    with backend("auto"):
        assert kernels.warm_up(torch.float32) and kernels.warm_up(torch.float64)
        assert not kernels.warm_up(torch.float16)
