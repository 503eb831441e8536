"""The strong dense baselines (docs/algorithms.md, "dense" and "powersgd"), against plain
references written here: the bf16/fp16 all-reduce is the rounded mean of torch's compress hooks,
metered at 2 bytes per element; PowerSGD is torch's powerSGD_hook step by step (error feedback,
warm start, the vanilla steps before start_iter), recomputed with plain loops over the matrices
in float64, on 2 and 4 hosted ranks through the production step (tests/helpers/stepped_ranks.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from experiments.engine.core.ledger import Collective
from experiments.runformat.errors import ConfigError
from sparsifiers.dense import Dense
from sparsifiers.common.layout import Layout
from sparsifiers.powersgd import PowerSGD
from tests.conftest import REPO, run_world
from tests.helpers.stepped_ranks import SteppedRanks, noise

# A conv weight (8 x 27 as a matrix), a bias, a linear weight of the same matrix shape (grouped
# with the conv, as torch groups by shape), a small one that is not worth compressing, a scalar.
SHAPES = [("conv", (8, 3, 3, 3)), ("bias", (8,)), ("fc", (8, 27)), ("small", (3, 2)), ("fc2", (20, 16)), ("scale", ())]
LAYOUT = Layout.from_shapes(SHAPES)
WIRE = {"bf16": torch.bfloat16, "fp16": torch.float16}


# -- low-precision dense ------------------------------------------------------------------------
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("reduction", ["ring", "rank_order"])
def test_low_precision_dense_is_the_rounded_mean_metered_at_two_bytes(precision, world_size, reduction):
    h = WIRE[precision]
    world = SteppedRanks([Dense(LAYOUT, world_size, r, precision=precision, error_feedback=False)
                          for r in range(world_size)], reduction=reduction)
    stream = noise(LAYOUT.numel, world_size, seed=3)
    for t in range(3):
        step = world.step(next(stream), t)
        # round_h(round_h(acc_r) / W): W is a power of two, so the quotient is exact in float64
        # and rounding it to h is the one rounding; the sum of W such values is exact in float64.
        contributions = [(acc.to(h).double() / world_size).to(h).double() for acc in step.accs]
        expected = torch.stack(contributions).sum(0).to(h).float()
        assert torch.equal(step.aggregate, expected)
        assert torch.equal(step.aggregate, step.aggregate.to(h).float())  # representable in h
        mean = torch.stack(step.accs).double().mean(0)
        assert float((step.aggregate.double() - mean).abs().max()) <= 4 * torch.finfo(h).eps * float(mean.abs().max())
        assert all(int(r.count_nonzero()) == 0 for r in step.residuals)  # no error feedback
        op = "all_reduce" if reduction == "ring" else "all_gather"
        assert world.comm.meter.collectives == [Collective(op, LAYOUT.numel, 2)]
        per_rank = (2 * (world_size - 1) / world_size if reduction == "ring" else world_size - 1) * LAYOUT.numel * 2
        assert np.allclose(world.comm.meter.sent, per_rank)


def test_fp32_dense_and_overlap_are_the_plain_mean():
    for knobs in ({}, {"overlap": True}, {"precision": "bf16", "overlap": True, "error_feedback": False}):
        method = Dense(LAYOUT, 2, 0, **knobs)
        assert method.describe()["overlap"] == knobs.get("overlap", False)
    worlds = [SteppedRanks([Dense(LAYOUT, 4, r, overlap=overlap) for r in range(4)]) for overlap in (False, True)]
    grads = next(noise(LAYOUT.numel, 4, seed=5))
    plain, overlapped = (world.step(grads, 0) for world in worlds)
    assert torch.equal(plain.aggregate, overlapped.aggregate)
    assert worlds[1].comm.meter.collectives == [Collective("all_reduce", LAYOUT.numel, 4)]


@pytest.mark.parametrize("knobs, message", [
    ({"precision": "fp8"}, "sparsifier.precision must be one of fp32, bf16, fp16"),
    ({"precision": "bf16"}, "set sparsifier.error_feedback=false"),
    ({"overlap": "yes"}, "sparsifier.overlap must be true or false"),
])
def test_dense_refuses_bad_knobs(knobs, message):
    with pytest.raises(ConfigError, match=message):
        Dense(LAYOUT, 2, 0, **knobs)


def test_wire_sizes_are_declared_for_a_cluster_model():
    assert [(w.what, w.elements, w.element_bytes) for w in Dense(LAYOUT, 2, 0).wire_allreduces(0)] == [("values", LAYOUT.numel, 4)]
    bf16 = Dense(LAYOUT, 8, 0, precision="bf16", error_feedback=False)
    assert [(w.elements, w.element_bytes) for w in bf16.wire_allreduces(0)] == [(LAYOUT.numel, 2)]
    method = PowerSGD(LAYOUT, 2, 0, matrix_approximation_rank=2, start_iter=3)
    # conv and fc (8 x 27, r 2): P 16, Q 54 each; fc2 (20 x 16): P 40, Q 32; the rest whole.
    assert method.describe()["wire"] == {"uncompressed": 8 + 6 + 1, "p": 16 + 16 + 40, "q": 54 + 54 + 32, "element_bytes": 4}
    assert [(w.what, w.elements) for w in method.wire_allreduces(2)] == [("values", LAYOUT.numel)]
    assert [(w.what, w.elements) for w in method.wire_allreduces(3)] == [("uncompressed", 15), ("p", 72), ("q", 140)]


# -- PowerSGD -----------------------------------------------------------------------------------
def gram_schmidt(matrix: torch.Tensor, epsilon: float = 0.0) -> torch.Tensor:
    """Classical Gram-Schmidt, column by column (float64)."""
    columns = []
    for i in range(matrix.shape[1]):
        column = matrix[:, i].clone()
        for previous in columns:
            column -= (previous @ column) * previous
        columns.append(column / (column.norm() + epsilon))
    return torch.stack(columns, 1)


class ReferencePowerSGD:
    """torch's powerSGD_hook in float64, plain: one matrix at a time, all ranks in one object."""

    def __init__(self, shapes, world_size: int, rank: int, start_iter: int, seed: int, warm_start: bool = True,
                 error_feedback: bool = True, min_rate: float = 2.0):
        self.world_size, self.start_iter, self.warm_start, self.error_feedback = world_size, start_iter, warm_start, error_feedback
        self.tensors, offset = [], 0  # (offset, n, m, r, compressed, numel)
        for _, shape in shapes:
            numel = int(np.prod(shape)) if shape else 1
            n = shape[0] if shape else 0  # a 0-d tensor: sent whole
            m = numel // n if n else 0
            r = min(n, m, rank)
            self.tensors.append((offset, n, m, r, bool(shape) and (n + m) * r * min_rate < n * m, numel))
            offset += numel
        self.numel = offset
        # torch's order for the random Q: compressed tensors grouped by matrix shape.
        shapes_seen = list(dict.fromkeys((n, m) for _, n, m, _, c, _ in self.tensors if c))
        self.order = [t for shape in shapes_seen for t in self.tensors if t[4] and (t[1], t[2]) == shape]
        self.seeds = np.random.RandomState(seed)
        self.q: dict[int, torch.Tensor] = {}
        self.residuals = [torch.zeros(self.numel, dtype=torch.float64) for _ in range(world_size)]

    def step(self, grads: list[torch.Tensor], t: int) -> torch.Tensor:
        W = self.world_size
        if t < self.start_iter:
            return torch.stack([g.double() / W for g in grads]).sum(0)
        accs = [g.double() + (res if self.error_feedback else 0) for g, res in zip(grads, self.residuals)]
        aggregate = torch.zeros(self.numel, dtype=torch.float64)
        for offset, _, _, _, compressed, size in self.tensors:
            if not compressed:  # sent whole: the sum over ranks, / W
                aggregate[offset:offset + size] = torch.stack([a[offset:offset + size] for a in accs]).sum(0) / W
        if not self.q or not self.warm_start:
            generator = torch.Generator().manual_seed(int(self.seeds.randint(1_000_000_000)))
            for offset, n, m, r, _, _ in self.order:
                self.q[offset] = gram_schmidt(torch.randn(1, m, r, generator=generator).double()[0])
        else:
            self.q = {offset: gram_schmidt(q) for offset, q in self.q.items()}
        for offset, n, m, r, _, _ in self.order:
            matrices = [a[offset:offset + n * m].view(n, m) for a in accs]
            p = gram_schmidt(sum(M @ self.q[offset] for M in matrices))
            self.q[offset] = sum(M.T @ p for M in matrices) / W
            aggregate[offset:offset + n * m] = (p @ self.q[offset].T).reshape(-1)
        self.residuals = [a - aggregate if self.error_feedback else torch.zeros_like(a) for a in accs]
        return aggregate


def reference(world_size: int, rank: int, start_iter: int, **knobs) -> ReferencePowerSGD:
    return ReferencePowerSGD(SHAPES, world_size, rank, start_iter, seed=0, **knobs)


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("rank, knobs", [(1, {}), (2, {}), (4, {}), (2, {"warm_start": False}),
                                         (2, {"error_feedback": False, "warm_start": False})])
def test_powersgd_is_torchs_hook_step_by_step(world_size, rank, knobs):
    start_iter = 2
    world = SteppedRanks([PowerSGD(LAYOUT, world_size, r, matrix_approximation_rank=rank, start_iter=start_iter, **knobs)
                          for r in range(world_size)])
    ref = reference(world_size, rank, start_iter, **knobs)
    stream = noise(LAYOUT.numel, world_size, seed=11)
    for t in range(6):
        grads = next(stream)
        step = world.step(grads, t)
        expected = ref.step(grads, t)
        scale = float(expected.abs().max())
        torch.testing.assert_close(step.aggregate.double(), expected, rtol=1e-4, atol=1e-5 * scale)
        for residual, want in zip(step.residuals, ref.residuals if t >= start_iter else [torch.zeros(LAYOUT.numel)] * world_size):
            torch.testing.assert_close(residual.double(), want.double(), rtol=1e-4, atol=1e-5 * scale)
        method = world.sparsifiers[0]
        sent = LAYOUT.numel if t < start_iter else method.uncompressed_numel + method.p_numel + method.q_numel
        assert step.counts == [sent] * world_size and step.aggregated == LAYOUT.numel
        sizes = [(c.op, c.elements, c.element_bytes) for c in world.comm.meter.collectives]
        assert sizes == [("all_reduce", w.elements, 4) for w in method.wire_allreduces(t)]


def test_powersgd_residual_is_acc_minus_the_aggregate_exactly():
    world = SteppedRanks([PowerSGD(LAYOUT, 2, r, start_iter=2) for r in range(2)])
    stream = noise(LAYOUT.numel, 2, seed=2)
    for t in range(4):
        step = world.step(next(stream), t)
        for acc, residual in zip(step.accs, step.residuals):
            assert torch.equal(residual, acc - step.aggregate if t >= 2 else torch.zeros_like(acc))


def test_powersgd_resumes_exactly():
    def world():
        return SteppedRanks([PowerSGD(LAYOUT, 4, r, matrix_approximation_rank=2, start_iter=2) for r in range(4)])
    stream = list(zip(range(8), noise(LAYOUT.numel, 4, seed=4)))
    first = world()
    for t, grads in stream[:5]:
        first.step(grads, t)
    states = [s.state_dict() for s in first.sparsifiers]
    residuals = [r.clone() for r in first.residuals]
    second = world()
    for sparsifier, state, residual, mine in zip(second.sparsifiers, states, residuals, second.residuals):
        sparsifier.load_state_dict(state)
        mine.copy_(residual)
    for t, grads in stream[5:]:
        assert torch.equal(first.step(grads, t).aggregate, second.step(grads, t).aggregate)


@pytest.mark.parametrize("warm_start", [True, False])
def test_powersgd_state_is_the_same_on_every_hosted_rank(warm_start):
    """Only the first hosted rank writes the aggregate, but every rank keeps (or, without warm
    start, clears) the same Q: a checkpoint holds the same state whatever rank it comes from."""
    world = SteppedRanks([PowerSGD(LAYOUT, 4, r, start_iter=2, warm_start=warm_start) for r in range(4)])
    for t, grads in zip(range(4), noise(LAYOUT.numel, 4, seed=6)):
        world.step(grads, t)
    states = [s.state_dict() for s in world.sparsifiers]
    for state in states:
        assert state["draws"] == (1 if warm_start else 2)
        if warm_start:
            assert torch.equal(state["q"], states[0]["q"])
        else:
            assert state["q"] is None


@pytest.mark.parametrize("knobs, message", [
    ({"start_iter": 1}, "sparsifier.start_iter must be >= 2"),
    ({"matrix_approximation_rank": 0}, "matrix_approximation_rank must be >= 1"),
    ({"min_compression_rate": 0}, "min_compression_rate must be > 0"),
    ({"orthogonalization_epsilon": -1.0}, "orthogonalization_epsilon must be >= 0"),
])
def test_powersgd_refuses_bad_knobs(knobs, message):
    with pytest.raises(ConfigError, match=message):
        PowerSGD(LAYOUT, 2, 0, **knobs)
    PowerSGD(LAYOUT, 2, 0, start_iter=0, error_feedback=False, warm_start=False)  # torch allows this one


@pytest.mark.parametrize("rank", [1, 2])
def test_powersgd_is_torchs_own_hook_in_two_gloo_processes(tmp_path, rank):
    """Torch's powerSGD_hook under DDP in 2 gloo processes (tests/helpers/powersgd_torch_harness.py) and
    this project's PowerSGD on 2 hosted ranks, fed the same local gradients: the same aggregate
    at every step, vanilla and compressed, with error feedback and warm start."""
    out = tmp_path / "torch.pt"
    steps, start_iter = 6, 2
    run_world([str(REPO / "tests" / "helpers" / "powersgd_torch_harness.py"), str(out), str(steps), str(start_iter), str(rank)], 2,
              timeout=180)
    recorded = torch.load(out)
    layout = Layout.from_shapes(recorded["shapes"])
    world = SteppedRanks([PowerSGD(layout, 2, r, matrix_approximation_rank=rank, start_iter=start_iter) for r in range(2)])
    assert len(world.sparsifiers[0].factored) == 1  # the 16 x 12 weight; everything else whole
    for t, record in enumerate(recorded["steps"]):
        step = world.step(record["local"], t)
        torch.testing.assert_close(step.aggregate, record["aggregate"], rtol=1e-5, atol=1e-7)
