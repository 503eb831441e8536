"""Every sparsifier through the real training loop (experiments/rank/train.py) on 3 and 4 hosted ranks,
every step recorded (tests/step_recorder.py) and recomputed from the documented semantics
(tests/exchange_reference.py): the aggregate is the mean over ranks of acc on the exchanged set
and zero elsewhere; each residual is acc with what was transmitted zeroed; the collectives are the
ones the exchange kind must issue, padding and size headers included, and the bytes their ring
formulas; and every logged number of the metric contract (traffic, density and its error against
the step's target, build-up, overlap, k, load imbalance, residual norms, loss, timings) is what
the recorded selections, counts and tensors say. The same records from real gloo processes are
checked in tests/test_distributed.py."""
from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
import torch
from hydra.utils import get_object

from experiments import metric_keys as keys
from experiments.core.world import init_world
from experiments.launcher.compose import compose_job
from experiments.rank.train import build_session, train
from tests.exchange_reference import (
    exchange_of, expected_collectives, expected_exchange, expected_exchange_metrics, ring_bytes,
)
from tests.harness import TINY
from tests.specs import EVERY_METHOD
from tests.step_recorder import RecordedStep, record_steps

WORKERS, STEPS = 4, 4
WORLDS = (3, 4)  # an odd world too: ring and binomial-tree formulas at a W that is no power of 2
SPECS = [*EVERY_METHOD, "topk:error_feedback=false"]


class ListSink:
    def __init__(self) -> None:
        self.rows: list[dict] = []

    def log(self, record: dict, step: int) -> None:
        self.rows.append({**record, "step": step})


def hosted_world(workers: int = WORKERS):
    with pytest.MonkeyPatch.context() as patch:
        for variable in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
            patch.delenv(variable, raising=False)  # one process hosting every rank
        return init_world(workers, "cpu", "gloo", timeout_s=30)


def run(spec: str, out: Path, workers: int = WORKERS) -> tuple[list[dict], list[RecordedStep], object]:
    method, *knobs = spec.split(":")
    cfg = compose_job([f"sparsifier={method}", f"workers={workers}", *TINY, *(f"sparsifier.{k}" for k in knobs),
                       f"max_steps={STEPS}", "epochs=1", "logger=local", "logger.log_every=1", "logger.progress=false",
                       "warmup_steps=0", "eval_limit=64", f"output_root={out}"])
    sink = ListSink()
    with record_steps() as steps:
        train(cfg, hosted_world(workers), sink, out)
    rows = [row for row in sink.rows if row["kind"] == keys.KIND_TRAIN]
    assert [row["step"] for row in rows] == [s.step for s in steps] == list(range(STEPS))
    return rows, steps, cfg


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[tuple[str, int], tuple[list[dict], list[RecordedStep], object]]:
    """(spec, W) -> the train rows, the recorded steps and the config of its run."""
    return {(spec, workers): run(spec, tmp_path_factory.mktemp(f"w{workers}"), workers) for spec in SPECS for workers in WORLDS}


def check_semantics(steps: list[RecordedStep], spec: str) -> None:
    """The aggregate, the residuals and the counts of every recorded step, against the plain
    reference. Shared by the real-process test (tests/test_distributed.py)."""
    kind = exchange_of(spec)
    assert {s.kind.value for s in steps} == {kind}
    for before, step in zip([None, *steps], steps):
        # Phase 1: acc = the residual the last step left + this step's (preconditioned) gradient.
        for rank, (carried, gradient, acc) in enumerate(zip(step.carried, step.gradients, step.accs)):
            assert torch.equal(carried, before.residuals[rank] if before else torch.zeros_like(acc)), (spec, step.step, rank)
            assert torch.equal(acc, carried + gradient), (spec, step.step, rank)
        expected = expected_exchange(step, kind)
        assert step.counts == expected.counts and step.aggregated == expected.union, (spec, step.step)
        assert step.shared_count == (0 if step.shared is None else step.shared.numel())
        # Exactly zero outside the exchanged set; inside, the mean to float32 rounding (sum order).
        assert torch.count_nonzero(step.aggregate[~expected.exchanged]) == 0, (spec, step.step)
        scale = float(expected.aggregate.abs().max())
        torch.testing.assert_close(step.aggregate.double(), expected.aggregate, rtol=1e-6, atol=1e-6 * scale)
        for rank, (acc, residual, zeroed) in enumerate(zip(step.accs, step.residuals, expected.zeroed)):
            kept = torch.where(zeroed, torch.zeros_like(acc), acc) if step.error_feedback else torch.zeros_like(acc)
            assert torch.equal(residual, kept), (spec, step.step, rank)  # acc = transmitted + residual, exactly
            assert torch.count_nonzero(acc[zeroed]) > 0  # something was really sent


def check_traffic(steps: list[RecordedStep], spec: str, averaged: int, reduction: str = "ring") -> None:
    """The collectives each step issued, and the bytes per rank they make, by hand."""
    kind = exchange_of(spec)
    for step in steps:
        issued = expected_collectives(step, kind, expected_exchange(step, kind), averaged, reduction)
        assert step.collectives == issued, (spec, step.step)
        sent, recv = ring_bytes(issued, step.world_size)
        assert step.sent.tolist() == pytest.approx(sent.tolist(), rel=1e-12)
        assert step.recv.tolist() == pytest.approx(recv.tolist(), rel=1e-12)


def unit_count(cfg, spec: str, workers: int) -> int:
    """DEFT's norms=global all-reduces one norm per unit (docs/algorithms.md, DEFT step 1): a
    parameter tensor of more than N / W elements is cut into W units, any other is one."""
    if "norms=global" not in spec:
        return 0
    session = build_session(cfg, hosted_world(workers))
    sizes = [p.numel() for p in session.model.parameters()]
    return sum(workers if size * workers > sum(sizes) else 1 for size in sizes)


@pytest.mark.parametrize("workers", WORLDS)
@pytest.mark.parametrize("spec", SPECS)
def test_aggregate_and_residuals_follow_the_exchange_semantics(runs, spec, workers):
    rows, steps, _ = runs[spec, workers]
    check_semantics(steps, spec)
    if spec.startswith("deft:density=0.3"):  # the common units are exercised
        assert any(s.shared_count for s in steps) == (spec == "deft:density=0.3")


@pytest.mark.parametrize("workers", WORLDS)
@pytest.mark.parametrize("spec", SPECS)
def test_traffic_is_the_collectives_by_hand(runs, spec, workers):
    _, steps, cfg = runs[spec, workers]
    check_traffic(steps, spec, unit_count(cfg, spec, workers))


def density_target(cfg, epoch: int = 0) -> float:
    """The step's target d: the configured one, or DGC's warm-up stage (never below d)."""
    node = cfg.sparsifier
    if node.name == "dgc" and node.warmup and epoch < len(node.warmup_densities):
        return max(node.warmup_densities[epoch], node.density)
    return 1.0 if node.name == "dense" else node.density


@pytest.mark.parametrize("workers", WORLDS)
@pytest.mark.parametrize("spec", SPECS)
def test_every_logged_metric_is_recomputed_from_the_step(runs, spec, workers):
    rows, steps, cfg = runs[spec, workers]
    kind = exchange_of(spec)
    for row, step in zip(rows, steps):
        expected = expected_exchange(step, kind)
        metrics = expected_exchange_metrics(step, spec, expected, *ring_bytes(step.collectives, workers), density_target(cfg))
        for key, value in metrics.items():
            assert row[key] == pytest.approx(value, rel=1e-12), (spec, step.step, key)
        residual_norms = [float(r.double().norm()) for r in step.residuals]
        acc_norms = [float(a.double().norm()) for a in step.accs]
        assert row[keys.RESIDUAL] == pytest.approx(sum(residual_norms) / workers, rel=1e-5, abs=1e-9)
        assert row[keys.REL_RESIDUAL] == pytest.approx(sum(r / a for r, a in zip(residual_norms, acc_norms)) / workers, rel=1e-5, abs=1e-9)
        assert row[keys.LOSS] == pytest.approx(sum(step.losses) / workers, rel=1e-12)
        # Timings: max and mean over the hosted ranks, and phases that are disjoint parts of the
        # step (one process runs its ranks one after the other).
        assert row[keys.SELECT_MAX] == max(step.select_ms) and row[keys.SELECT_MEAN] == pytest.approx(sum(step.select_ms) / workers)
        assert row[keys.COMPUTE_MAX] == max(step.compute_ms) and row[keys.EXCHANGE] == step.exchange_ms
        assert row[keys.STEP] == step.step_ms
        assert 0 < sum(step.compute_ms) + sum(step.select_ms) + step.exchange_ms <= step.step_ms
        assert min(step.select_ms) > 0 and step.exchange_ms > 0


@pytest.mark.parametrize("method", ["deft", "cltk"])
def test_the_leaders_plan_time_is_in_its_selection_time(method, tmp_path, monkeypatch):
    """docs/metrics.md: time/select_ms is select's wall time with the leader's plan time added to
    the leader's. A plan made 40 ms slower shows in the leader's time only."""
    sparsifier_class = get_object(compose_job([f"sparsifier={method}"]).sparsifier._target_)
    plan = sparsifier_class.make_plan

    def slow_plan(self, acc, step):
        time.sleep(0.04)
        return plan(self, acc, step)

    monkeypatch.setattr(sparsifier_class, "make_plan", slow_plan)
    rows, steps, _ = run(method, tmp_path)
    for row, step in zip(rows, steps):
        others = [ms for rank, ms in enumerate(step.select_ms) if rank != step.leader]
        assert step.select_ms[step.leader] >= 40.0 > max(others), step.select_ms
        assert row[keys.SELECT_MAX] == step.select_ms[step.leader]
    assert math.isclose(rows[0][keys.SELECT_MEAN], sum(steps[0].select_ms) / WORKERS)

