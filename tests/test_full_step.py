"""Every sparsifier through the real training loop (experiments/engine/rank/train.py) on 2, 3 and 4
hosted ranks, every step recorded (tests/helpers/step_recorder.py) and recomputed from the documented semantics
(tests/helpers/exchange_reference.py): acc is the carried residual plus the gradient; the aggregate is the
mean over ranks of acc on the exchanged set and zero elsewhere; each residual is acc with what was
transmitted zeroed; DEFT's common units are the coordinates its plan names; the collectives are
the ones the exchange kind must issue (padding, size headers, the plan's and the averaged inputs'
sizes by hand), and the bytes and modelled time their formulas; every logged number of the metric
contract (traffic, density and its error against the step's target, build-up, overlap, k, load
imbalance, residual norms, loss) is what the recorded selections, counts and tensors say; and on
a fake clock each timing covers exactly its phases. The same records from real gloo processes are
checked in tests/test_distributed.py."""
from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.utils import get_object

import experiments.engine.core.hosted as hosted_module
import experiments.engine.core.sparsify as sparsify_module
import experiments.engine.core.step as step_module
import experiments.engine.core.stopwatch as stopwatch_module
from experiments.runformat import metric_keys as keys
from experiments.engine.core.network import NetworkModel
from experiments.engine.core.world import init_world
from experiments.engine.launcher.compose import compose_job
from experiments.engine.rank.train import train
from tests.conftest import ListSink
from tests.helpers.exchange_reference import (
    deft_common_coordinates, deft_units, exchange_of, expected_collectives, expected_exchange,
    expected_exchange_metrics, low_rank_sizes, modelled_ms, oktopk_replayed, plan_length, ring_bytes,
    sends_size_header, wire_dtype_of,
)
from tests.helpers.harness import TINY, spec_overrides
from tests.helpers.specs import EVERY_METHOD, OKTOPK_SHORT
from tests.helpers.step_recorder import RecordedStep, record_steps

WORKERS, STEPS = 4, 4
WORLDS = (2, 3, 4)  # an odd world too: ring and binomial-tree formulas at a W that is no power of 2
# Error feedback off, and the deterministic reduction (its sums are all-gathers) for every kind
# of value sum: the exchange's, DEFT's averaged norms and a calibrated threshold start's float64.
SPECS = [*EVERY_METHOD, "topk:error_feedback=false", "dense:reduction=rank_order", "deft:norms=global:reduction=rank_order",
         "micro:threshold_start=calibrated:reduction=rank_order"]
NETWORK = "network=10gbe"  # so that the modelled times are logged too
# gTop-k's tree needs W a power of 2 (W = 3 is refused: tests/test_gtopk.py).
CASES = [(spec, workers) for spec in SPECS for workers in WORLDS if not (spec.startswith("gtopk") and workers == 3)]
# Ok-Topk's recompute steps zeroing the exact intersection instead of the released lookup: at W = 4 only.
CASES.append((f"{OKTOPK_SHORT}:recompute_residual=intersection", 4))


def hosted_world(cfg):
    """The world the rank process builds from `cfg` (experiments/engine/rank/worker.py), every rank here."""
    network = NetworkModel.from_config(cfg.network)
    with pytest.MonkeyPatch.context() as patch:
        for variable in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
            patch.delenv(variable, raising=False)  # one process hosting every rank
        return init_world(cfg.workers, "cpu", "gloo", 30, network, cfg.reduction)


def reduction_of(spec: str) -> str:
    return next((k.split("=")[1] for k in spec.split(":") if k.startswith("reduction=")), "ring")


def run(spec: str, out: Path, workers: int = WORKERS, overrides: tuple[str, ...] | list[str] = ()) -> tuple[list[dict], list[RecordedStep], object]:
    cfg = compose_job([*spec_overrides(spec), f"workers={workers}", *TINY, NETWORK, f"max_steps={STEPS}", "epochs=1",
                       "logger=local", "logger.log_every=1", "logger.progress=false", "warmup_steps=0", "eval_limit=64",
                       f"output_root={out}", *overrides])
    sink = ListSink()
    with record_steps() as steps:
        train(cfg, hosted_world(cfg), sink, out)
    rows = [row for row in sink.rows if row["kind"] == keys.KIND_TRAIN]
    assert [row["step"] for row in rows] == [s.step for s in steps] == list(range(cfg.max_steps))
    return rows, steps, cfg


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[tuple[str, int], tuple[list[dict], list[RecordedStep], object]]:
    """(spec, W) -> the train rows, the recorded steps and the config of its run."""
    return {(spec, workers): run(spec, tmp_path_factory.mktemp(f"w{workers}"), workers) for spec, workers in CASES}


def check_semantics(steps: list[RecordedStep], spec: str) -> None:
    """The aggregate, the residuals and the counts of every recorded step, against the plain
    reference. Shared by the real-process test (tests/test_distributed.py)."""
    kind = exchange_of(spec)
    assert len(steps) >= 4 and {s.kind.value for s in steps} == {kind}
    replayed = oktopk_replayed(steps, spec) if kind == "sparse_reduce_scatter" else None
    for index, (before, step) in enumerate(zip([None, *steps], steps)):
        # Phase 1: acc = the residual the last step left + this step's (preconditioned) gradient.
        for rank, (carried, gradient, acc) in enumerate(zip(step.carried, step.gradients, step.accs, strict=True)):
            assert torch.equal(carried, before.residuals[rank] if before else torch.zeros_like(acc)), (spec, step.step, rank)
            assert torch.equal(acc, carried + gradient), (spec, step.step, rank)
        if spec.split(":")[0] == "deft":  # the common units: the plan's, sent by the leader or added by every rank
            common = deft_common_coordinates(step, step.parameter_sizes)
            if "common_units=leader" in spec:
                assert step.shared is None and bool(torch.isin(common, step.selections[step.leader]).all())
            else:
                assert torch.equal(step.shared if step.shared is not None else torch.empty(0, dtype=torch.int64), common)
        expected = expected_exchange(step, kind, wire_dtype_of(spec)) if replayed is None else replayed[index][1]
        if replayed is not None:  # Ok-Topk: its threshold selection, replayed
            selections = replayed[index][0]
            assert [None if s is None else s.tolist() for s in step.selections] == \
                [None if s is None else s.tolist() for s in selections], (spec, step.step)
        if kind == "low_rank":  # PowerSGD: its own reference is tests/test_dense_baselines.py
            check_low_rank(step, spec)
            continue
        assert step.counts == expected.counts and step.aggregated == expected.union, (spec, step.step)
        assert step.shared_count == (0 if step.shared is None else step.shared.numel())
        # Exactly zero outside the exchanged set; inside, the mean to float32 rounding (sum order).
        assert torch.count_nonzero(step.aggregate[~expected.exchanged]) == 0, (spec, step.step)
        scale = float(expected.aggregate.abs().max())
        torch.testing.assert_close(step.aggregate.double(), expected.aggregate, rtol=1e-6, atol=1e-6 * scale)
        for rank, (acc, residual, zeroed) in enumerate(zip(step.accs, step.residuals, expected.zeroed, strict=True)):
            kept = torch.where(zeroed, torch.zeros_like(acc), acc) if step.error_feedback else torch.zeros_like(acc)
            assert torch.equal(residual, kept), (spec, step.step, rank)  # acc = transmitted + residual, exactly
            # something was really sent (gTop-k, Ok-Topk: by the ranks whose pairs reached the aggregate)
            assert torch.count_nonzero(acc[zeroed]) > 0 or kind in ("tree_merge", "sparse_reduce_scatter")
        if kind in ("tree_merge", "sparse_reduce_scatter"):
            assert any(torch.count_nonzero(acc[zeroed]) for acc, zeroed in zip(step.accs, expected.zeroed))


def check_low_rank(step: RecordedStep, spec: str) -> None:
    """PowerSGD (docs/algorithms.md): before start_iter (2 in the preset) the plain mean and an
    empty residual; then every rank sent the three messages' elements, the tensors sent whole
    are aggregated as their mean, and each residual is acc - aggregate, exactly."""
    numel = step.accs[0].numel()
    compressed = step.step >= 2
    sizes = low_rank_sizes(step.parameter_shapes) if compressed else [numel]
    assert step.counts == [sum(sizes)] * step.world_size and step.aggregated == numel, (spec, step.step)
    mean = torch.stack([acc.double() for acc in step.accs]).mean(0)
    whole = torch.zeros(numel, dtype=torch.bool)
    offset = 0
    for shape, size in zip(step.parameter_shapes, step.parameter_sizes):
        if not compressed or low_rank_sizes([shape]) in ([size], []):  # sent whole (or the vanilla step)
            whole[offset:offset + size] = True
        offset += size
    torch.testing.assert_close(step.aggregate.double()[whole], mean[whole], rtol=1e-6, atol=1e-6 * float(mean.abs().max()))
    assert compressed == bool((~whole).any()), (spec, step.step)  # the preset's model has matrices worth compressing
    for acc, residual in zip(step.accs, step.residuals, strict=True):
        kept = acc - step.aggregate if compressed and step.error_feedback else torch.zeros_like(acc)
        assert torch.equal(residual, kept), (spec, step.step)


def averaged_inputs(spec: str, step: int, sizes: list[int], workers: int) -> tuple[int, int]:
    """What a step averages over ranks before the plan, (elements, bytes each): DEFT's
    norms=global one float32 norm per unit at every step; a calibrated threshold start
    (MiCRO, ExDyna) one float64, its k-th largest |acc|, at step 0 only; otherwise nothing."""
    if "norms=global" in spec:
        return len(deft_units(sizes, workers)), 4
    if "threshold_start=calibrated" in spec and step == 0:
        return 1, 8
    return 0, 4


def check_traffic(steps: list[RecordedStep], spec: str, density: float) -> None:
    """The collectives each step issued, every size by hand, and the bytes per rank they make."""
    kind = exchange_of(spec)
    assert steps
    replayed = oktopk_replayed(steps, spec, reduction_of(spec)) if kind == "sparse_reduce_scatter" else None
    for index, step in enumerate(steps):
        sizes = step.parameter_sizes
        plan = plan_length(spec, step, sizes, density) if step.leader is not None else 0
        averaged, averaged_bytes = averaged_inputs(spec, step.step, sizes, step.world_size)
        wire = wire_dtype_of(spec)
        if replayed is not None:  # Ok-Topk's collectives come with its replay
            issued = replayed[index][2]
        else:
            issued = expected_collectives(step, kind, expected_exchange(step, kind, wire), averaged, plan, reduction_of(spec),
                                          averaged_bytes, 2 if wire is not None else 4,
                                          low_rank_sizes(step.parameter_shapes) if kind == "low_rank" and step.step >= 2 else None,
                                          sends_size_header(spec))
        assert step.collectives == issued, (spec, step.step)
        sent, recv = ring_bytes(issued, step.world_size)
        assert step.sent.tolist() == pytest.approx(sent.tolist(), rel=1e-12)
        assert step.recv.tolist() == pytest.approx(recv.tolist(), rel=1e-12)


@pytest.mark.parametrize("spec, workers", CASES)
def test_aggregate_and_residuals_follow_the_exchange_semantics(runs, spec, workers):
    rows, steps, _ = runs[spec, workers]
    check_semantics(steps, spec)
    if spec.startswith("deft:density=0.3"):  # the common units are exercised
        assert any(s.shared_count for s in steps) == (spec == "deft:density=0.3")


@pytest.mark.parametrize("spec, workers", CASES)
def test_traffic_is_the_collectives_by_hand(runs, spec, workers):
    _, steps, cfg = runs[spec, workers]
    check_traffic(steps, spec, cfg.sparsifier.density)


def density_target(cfg, epoch: int = 0) -> float:
    """The step's target d: the configured one, or DGC's warm-up stage (never below d)."""
    node = cfg.sparsifier
    if node.name == "dgc" and node.warmup and epoch < len(node.warmup_densities):
        return max(node.warmup_densities[epoch], node.density)
    return 1.0 if node.name in ("dense", "dense_bf16", "dense_fp16", "dense_overlap", "powersgd") else node.density


def check_logged_metrics(rows: list[dict], steps: list[RecordedStep], cfg, spec: str) -> None:
    """Every train row's metric-contract numbers, recomputed from its recorded step."""
    kind, workers = exchange_of(spec), cfg.workers
    network = (cfg.network.latency_us, cfg.network.bandwidth_gbit)
    dense_allreduce = [expected_collectives(steps[0], "dense", expected_exchange(steps[0], "dense"))[-1]]  # N floats, ring
    assert steps[0].accs[0].numel() == sum(steps[0].parameter_sizes)
    replayed = oktopk_replayed(steps, spec) if kind == "sparse_reduce_scatter" else None
    for index, (row, step) in enumerate(zip(rows, steps, strict=True)):
        expected = expected_exchange(step, kind, wire_dtype_of(spec)) if replayed is None else replayed[index][1]
        target, k_target = density_target(cfg, row["epoch"]), None
        if replayed is not None and step.step < cfg.sparsifier.warmup_steps:  # Ok-Topk's dense warm-up
            target = 1.0
        if cfg.sparsifier.name == "accordion":  # the first detection (step 0) picks k_high everywhere;
            # one epoch holds no other: the target is sum_l K_l = max(1, int(k_high * n_l)) (k_high as float32)
            k_target = sum(max(1, int(float(np.float32(cfg.sparsifier.k_high)) * n)) for n in step.parameter_sizes)
            target = k_target / sum(step.parameter_sizes)
        metrics = expected_exchange_metrics(step, spec, expected, *ring_bytes(step.collectives, workers), target, k_target)
        metrics[keys.EXCHANGE_MODEL] = modelled_ms(step.collectives, workers, *network)
        metrics[keys.DENSE_MODEL] = modelled_ms(dense_allreduce, workers, *network)
        for key, value in metrics.items():
            assert row[key] == pytest.approx(value, rel=1e-12), (spec, step.step, key)
        residual_norms = [float(r.double().norm()) for r in step.residuals]
        acc_norms = [float(a.double().norm()) for a in step.accs]
        assert row[keys.RESIDUAL] == pytest.approx(sum(residual_norms) / workers, rel=1e-5, abs=1e-9)
        assert row[keys.REL_RESIDUAL] == pytest.approx(sum(r / a for r, a in zip(residual_norms, acc_norms)) / workers, rel=1e-5, abs=1e-9)
        assert row[keys.LOSS] == pytest.approx(sum(step.losses) / workers, rel=1e-12)


@pytest.mark.parametrize("spec, workers", CASES)
def test_every_logged_metric_is_recomputed_from_the_step(runs, spec, workers):
    check_logged_metrics(*runs[spec, workers], spec)


def test_dgc_is_measured_against_the_target_of_its_warm_up_stage(tmp_path):
    """DGC's warm-up (docs/algorithms.md): the target density of epoch e is warmup_densities[e]
    (never below d). Three epochs of two steps: each row's target and error are its stage's."""
    rows, steps, cfg = run("dgc", tmp_path, overrides=["dataset.num_train=64", "epochs=3", "max_steps=6"])
    assert [row["epoch"] for row in rows] == [0, 0, 1, 1, 2, 2]
    assert len({row[keys.DENSITY_TARGET] for row in rows}) == 3
    check_logged_metrics(rows, steps, cfg, "dgc")


class FakeClock:
    """step.py's clock (`time.perf_counter`), advanced only where a test says a phase took time."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def take(self, ms: float) -> None:
        self.now += ms / 1e3


@pytest.mark.parametrize("method", ["topk", "deft", "cltk", "dense"])
def test_each_timing_covers_exactly_its_phases(method, tmp_path, monkeypatch):
    """docs/metrics.md "Time": on a clock that moves only inside the phases, rank r's backward
    takes 10(r+1) ms and its accumulation 3 ms (compute), its select 5(r+1) ms, the
    leader's plan 40 ms (added to the leader's select time), the exchange 7 ms; the step is
    their sum. Every time/* key of every row is that, exactly."""
    clock = FakeClock()
    for module in (step_module, sparsify_module, stopwatch_module):  # compute and update; plan, select, exchange
        monkeypatch.setattr(module, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    accumulate, exchange, backward = hosted_module.accumulate, sparsify_module.exchange, torch.Tensor.backward
    backwards = []  # the ranks run one after the other: the i-th backward of a step is rank i's

    def timed_backward(self, *args, **kwargs):
        clock.take(10 * (len(backwards) % WORKERS + 1))
        backwards.append(None)
        return backward(self, *args, **kwargs)

    def timed_accumulate(*args):
        clock.take(3)
        return accumulate(*args)

    def timed_exchange(*args, **kwargs):
        clock.take(7)
        return exchange(*args, **kwargs)

    sparsifier_class = get_object(compose_job([f"sparsifier={method}"]).sparsifier._target_)
    select, make_plan = sparsifier_class.select, getattr(sparsifier_class, "make_plan", None)  # a LeaderPlan's

    def timed_select(self, acc, step, plan=None):
        clock.take(5 * (self.rank + 1))
        return select(self, acc, step, plan)

    def timed_plan(self, acc, step):
        clock.take(40)
        return make_plan(self, acc, step)

    monkeypatch.setattr(torch.Tensor, "backward", timed_backward)
    monkeypatch.setattr(hosted_module, "accumulate", timed_accumulate)
    monkeypatch.setattr(sparsify_module, "exchange", timed_exchange)
    monkeypatch.setattr(sparsifier_class, "select", timed_select)
    if make_plan is not None:
        monkeypatch.setattr(sparsifier_class, "make_plan", timed_plan)
    rows, steps, _ = run(method, tmp_path)
    compute = [10.0 * (rank + 1) + 3 for rank in range(WORKERS)]
    for row, step in zip(rows, steps, strict=True):
        selects = [5.0 * (rank + 1) + (40 if rank == step.leader else 0) for rank in range(WORKERS)]
        assert (step.leader is not None) == (method in ("deft", "cltk"))
        assert row[keys.COMPUTE_MAX] == pytest.approx(max(compute)) and row[keys.COMPUTE_MEAN] == pytest.approx(sum(compute) / WORKERS)
        assert row[keys.SELECT_MAX] == pytest.approx(max(selects)) and row[keys.SELECT_MEAN] == pytest.approx(sum(selects) / WORKERS)
        assert row[keys.EXCHANGE] == pytest.approx(7.0)
        assert row[keys.STEP] == pytest.approx(sum(compute) + sum(selects) + 7)
