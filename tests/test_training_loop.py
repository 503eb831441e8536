"""The training loop itself (experiments/engine/rank/train.py), in this process: two hosted ranks, the
dense exchange, three steps. Its traffic per logged step must be the dense all-reduce's, worked
out by hand, at every step (not accumulated over steps), and the summary's total their sum."""
from __future__ import annotations

from pathlib import Path

import pytest

from experiments.runformat import metric_keys as keys
from experiments.engine.core import ledger
from experiments.engine.core.ledger import Collective
from experiments.engine.core.world import init_world
from experiments.engine.launcher.compose import compose_job
from experiments.engine.rank import run_log
from experiments.engine.rank.train import train
from tests.conftest import ListSink


def test_every_step_meters_its_own_traffic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(variable, raising=False)  # one process hosting both ranks
    cfg = compose_job(["sparsifier=dense", "dataset=digits", "model=mlp", "workers=2", "max_steps=3", "epochs=1",
                       "logger=local", "logger.log_every=1", "logger.progress=false", "warmup_steps=0",
                       f"output_root={tmp_path}"])
    world = init_world(2, "cpu", "gloo", timeout_s=30)
    sink = ListSink()
    summary = train(cfg, world, sink, tmp_path)
    train_rows = [row for row in sink.rows if row["kind"] == keys.KIND_TRAIN]
    assert [row["step"] for row in train_rows] == [0, 1, 2]
    numel = summary["numel"]
    assert numel > 1000 and train_rows[0][keys.DENSE_BYTES] == 4.0 * numel
    # W = 2: a ring all-reduce of N float32 sends 2(W-1)/W * N * 4 = 4N bytes per rank.
    assert [row[keys.SENT_MAX] for row in train_rows] == [4.0 * numel] * 3
    assert [row[keys.RECV_MEAN] for row in train_rows] == [4.0 * numel] * 3
    assert summary[keys.SENT_TOTAL_MAX] == 3 * 4.0 * numel


@pytest.mark.parametrize("every, steps, evaluated", [(2, 5, [1, 3, 4]), (1, 3, [0, 1, 2])])
def test_eval_every_steps_evaluates_between_epoch_ends_once_per_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      every: int, steps: int, evaluated: list[int]) -> None:
    """eval_every_steps=n: an evaluation after every n-th step (logged at the step it follows),
    and the run's last step evaluated once, by the end-of-loop evaluation, never twice. Every
    logging step writes its ledger, the meter's collectives as text."""
    for variable in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(variable, raising=False)
    cfg = compose_job(["sparsifier=dense", "dataset=digits", "model=mlp", "workers=2", f"max_steps={steps}", "epochs=1",
                       "logger=local", "logger.log_every=1", "logger.progress=false", "warmup_steps=0",
                       f"eval_every_steps={every}", "eval_limit=64", f"output_root={tmp_path}"])
    world = init_world(2, "cpu", "gloo", timeout_s=30)
    sink = ListSink()
    summary = train(cfg, world, sink, tmp_path)
    assert [row["step"] for row in sink.rows if row["kind"] == keys.KIND_EVAL] == evaluated
    train_rows = [row for row in sink.rows if row["kind"] == keys.KIND_TRAIN]
    assert len(train_rows) == steps
    assert all(ledger.decode(row[keys.LEDGER]) == [Collective("all_reduce", summary["numel"], 4)] for row in train_rows)


def test_position_bins_log_where_the_union_and_rank_0s_accumulator_lie(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """position_bins=n: every logged train row holds n counts of U's coordinates, adding up to
    |U|, and n energies of rank 0's accumulator; the summary holds the layout the end-to-end
    model replays DEFT's units on (experiments/studies/endtoend/structure.py)."""
    for variable in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(variable, raising=False)
    cfg = compose_job(["sparsifier=deft", "dataset=digits", "model=mlp", "workers=2", "max_steps=3", "epochs=1",
                       "logger=local", "logger.log_every=2", "logger.progress=false", "warmup_steps=0",
                       "position_bins=16", "eval_limit=64", f"output_root={tmp_path}"])
    world = init_world(2, "cpu", "gloo", timeout_s=30)
    sink = ListSink()
    summary = train(cfg, world, sink, tmp_path)
    train_rows = [row for row in sink.rows if row["kind"] == keys.KIND_TRAIN]
    assert [row["step"] for row in train_rows] == [0, 2]
    for row in train_rows:
        assert len(row[keys.POSITIONS]) == len(row[keys.ENERGY]) == 16
        assert sum(row[keys.POSITIONS]) == round(row[keys.DENSITY_ACTUAL] * summary["numel"])
        assert min(row[keys.ENERGY]) >= 0 and sum(row[keys.ENERGY]) > 0
    assert sum(summary["tensor_numels"]) == summary["numel"]


def test_near_the_target_the_run_evaluates_every_eval_near_every_steps_and_stops_at_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """eval_every_steps=10, eval_near=0.05 and eval_near_every=4 around eval_target=0.8: after
    step 10 (0.5, far) the next evaluation is step 20 (0.76: near), then every 4 steps (and 30,
    the regular one), staying near when a value dips out of the band (0.7 at 28), until the
    first value >= 0.8, at 32 steps, where stop_at_target ends the run (its summary says so)
    without evaluating that step twice."""
    for variable in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(variable, raising=False)
    curve = iter([0.5, 0.76, 0.77, 0.7, 0.78, 0.81, 0.9, 0.9])
    monkeypatch.setattr(run_log, "evaluate_model", lambda *args: {keys.ACCURACY: next(curve)})
    cfg = compose_job(["sparsifier=dense", "dataset=digits", "model=mlp", "workers=2", "max_steps=40", "epochs=1",
                       "batch_size=8", "logger=local", "logger.log_every=50", "logger.progress=false",
                       "eval_every_steps=10", "eval_target=0.8", "eval_near=0.05", "eval_near_every=4",
                       "stop_at_target=true", f"output_root={tmp_path}"])
    world = init_world(2, "cpu", "gloo", timeout_s=30)
    sink = ListSink()
    summary = train(cfg, world, sink, tmp_path)
    evaluated = [row["step"] + 1 for row in sink.rows if row["kind"] == keys.KIND_EVAL]  # steps done
    assert evaluated == [10, 20, 24, 28, 30, 32]
    assert summary["stopped_at_target"] == 32 and summary["steps"] == 32


class _Gathering:
    """A two-process world's comm as seen from the process without rank 0: rank 0 reached it."""

    def __init__(self) -> None:
        self.gathered: list[int] = []

    def gather_stats(self, local):
        import torch

        self.gathered.append(int(local.item()))
        return torch.cat([torch.ones_like(local), local])


def test_every_process_learns_of_the_stop_from_rank_0_at_the_steps_it_could_evaluate():
    from types import SimpleNamespace

    from experiments.engine.rank.target import TargetWatch

    cfg = compose_job(["eval_every_steps=10", "eval_target=0.8", "eval_near_every=4", "stop_at_target=true"])
    comm = _Gathering()
    world = SimpleNamespace(processes=2, device="cpu", comm=comm)
    watch = TargetWatch(cfg, keys.ACCURACY)  # this process never evaluates: nothing reached here
    assert not watch.stops(world, 7)  # neither cadence's step: rank 0 did not evaluate, no gather
    assert comm.gathered == []
    assert watch.stops(world, 8) and comm.gathered == [0]
    assert watch.stops(world, 13, epoch_end=True)
