"""Hosted ranks from 2 to 64 workers in one process: Top-k's build-up grows with W while the
partition methods stay at 1, and each MiCRO rank scans N / W elements."""
from __future__ import annotations

import pytest

from experiments.engine.launcher.compose import compose_job
from experiments.engine.core.step import train_step
from experiments.engine.rank.train import build_session
from experiments.engine.core.world import init_world

WORKERS = (2, 8, 64)
STEPS = 3
TINY = ["dataset=synthetic", "dataset.num_train=4096", "model=mlp", "model.hidden=64", "batch_size=8",
        "sparsifier.density=0.01", "processes=1"]


def hosted_run(method: str, workers: int) -> tuple[list[dict], list[float], int]:
    world = init_world(workers, "cpu", "gloo", timeout_s=60)
    assert world.kind == "hosted" and world.processes == 1
    session = build_session(compose_job([f"sparsifier={method}", f"workers={workers}", *TINY]), world)
    batches = [iter(r.batches.epoch(0)) for r in session.replicas]
    rows, scanned = [], []
    for step in range(STEPS):
        world.comm.meter.reset()
        outcome = train_step(session.ranks, session.model, session.task, session.optimizer,
                             session.replicas, [next(b) for b in batches], step, measure_norms=False)
        rows.append(session.ranks.metrics(outcome.sparsified))
        scanned.append(session.method.metrics().get("selection/scanned"))
    return rows, scanned, session.layout.numel


def mean_buildup(rows: list[dict]) -> float:
    return sum(row["buildup"] for row in rows) / len(rows)


def test_topk_build_up_rises_with_workers():
    buildups = [mean_buildup(hosted_run("topk", w)[0]) for w in WORKERS]
    assert buildups[0] > 1.0 and buildups == sorted(buildups) and buildups[-1] > 2 * buildups[0]


@pytest.mark.parametrize("method", ["deft", "micro", "exdyna"])
def test_partition_methods_have_no_build_up_at_any_worker_count(method):
    for workers in WORKERS:
        rows, _, _ = hosted_run(method, workers)
        assert [row["buildup"] for row in rows] == pytest.approx([1.0] * STEPS)
        assert [row["selection/overlap"] for row in rows] == pytest.approx([1.0] * STEPS)


def test_each_micro_rank_scans_n_over_w_elements():
    for workers in WORKERS:
        _, scanned, numel = hosted_run("micro", workers)
        assert all(numel // workers <= s <= numel // workers + 1 for s in scanned), (workers, scanned)
