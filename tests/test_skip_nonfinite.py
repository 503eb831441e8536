"""on_nonfinite=skip (experiments/engine/core/skip.py): a step with a non-finite loss, gradient or aggregate
on any rank leaves parameters, residuals, optimizer state, sparsifier state and BatchNorm
buffers exactly as before it, on every rank; the run ends done with the step logged as skipped;
too many skipped steps in a row fail the run."""
from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from experiments.runformat import run_dir as run_files
from experiments.engine.core import step as step_module
from experiments.engine.launcher.compose import compose_job
from experiments.engine.core.finite import PARAMETERS, NonFiniteValue
from experiments.engine.core.skip import SkipGuard, SkippedStep
from experiments.engine.core.step import train_step
from experiments.engine.rank.train import build_session
from experiments.engine.core.world import init_world
from tests.conftest import TINY_RUN, run_cli

BAD_STEP, BAD_RANK, WORKERS = 3, 1, 4


def state_of(session) -> dict:
    """Everything a skipped step must leave alone, copied."""
    return copy.deepcopy({
        "params": [p.detach() for p in session.model.parameters()],
        "model_buffers": [b.detach() for b in session.model.buffers()],
        "optimizer": session.optimizer.state_dict(),
        "residuals": session.ranks.residuals,
        "rank_buffers": [r.buffers for r in session.replicas],
        "sparsifiers": [s.state_dict() for s in session.ranks.sparsifiers],
    })


def equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return a == b


def hosted_session(sparsifier: str, *knobs: str):
    """The CNN (BatchNorm: every hosted rank has its own buffers) on digits, 4 ranks in one process;
    `knobs`: overrides of the sparsifier's (`sparsifier.threshold_start=calibrated`)."""
    cfg = compose_job([*TINY_RUN, f"sparsifier={sparsifier}", *knobs, "model=cnn", f"workers={WORKERS}", "batch_size=8",
                       "on_nonfinite=skip"])
    world = init_world(WORKERS, "cpu", "gloo", 60)
    session = build_session(cfg, world)
    for sparsifier in session.ranks.sparsifiers:
        sparsifier.start_epoch(0, session.replicas[0].batches.steps_per_epoch)
    return world, session, [iter(r.batches.epoch(0)) for r in session.replicas]


def step(world, session, iterators, number: int, guard: SkipGuard, poison: bool = False):
    batches = [next(iterator) for iterator in iterators]
    if poison:  # a NaN pixel in rank 1's batch: its loss is NaN, and so are its BatchNorm statistics
        images, labels = batches[BAD_RANK]
        images = images.clone()
        images[0].view(-1)[0] = float("nan")
        batches[BAD_RANK] = (images, labels)
    return train_step(session.ranks, session.model, session.task, session.optimizer, session.replicas,
                      batches, number, measure_norms=False, guard=guard)


@pytest.mark.parametrize("sparsifier", ["topk", "dgc", "micro"])  # dgc: momentum changed in precondition
def test_a_skipped_step_leaves_every_rank_exactly_as_before_it(sparsifier):
    world, session, iterators = hosted_session(sparsifier)
    guard = SkipGuard(max_in_a_row=10)
    for number in range(BAD_STEP):
        assert step(world, session, iterators, number, guard).skipped is None
    before = state_of(session)
    outcome = step(world, session, iterators, BAD_STEP, guard, poison=True)
    assert outcome.skipped == SkippedStep(BAD_STEP, BAD_RANK, "loss")
    assert outcome.sparsified is None, "nothing of a skipped step is exchanged"
    assert any(r.abs().sum() > 0 for r in session.ranks.residuals), "error feedback holds something to keep"
    after = state_of(session)
    for key in before:
        assert equal(before[key], after[key]), key
    # The run goes on from there: the next step trains.
    outcome = step(world, session, iterators, BAD_STEP + 1, guard)
    assert outcome.skipped is None
    assert not equal(before["params"], state_of(session)["params"])
    assert all(bool(torch.isfinite(p).all()) for p in session.model.parameters())


def test_a_non_finite_aggregate_skips_after_the_exchange_and_restores(monkeypatch):
    world, session, iterators = hosted_session("topk")
    guard = SkipGuard(max_in_a_row=10)
    step(world, session, iterators, 0, guard)
    before = state_of(session)
    real_check = step_module.check_aggregate

    def aggregate_overflowed(aggregate, number):
        aggregate[0] = math.inf
        real_check(aggregate, number)

    monkeypatch.setattr(step_module, "check_aggregate", aggregate_overflowed)
    outcome = step(world, session, iterators, 1, guard)
    assert outcome.skipped == SkippedStep(1, None, "aggregate")
    after = state_of(session)
    for key in before:
        assert equal(before[key], after[key]), key


def poison_the_next_update(monkeypatch, optimizer) -> None:
    """The optimizer's next step leaves a NaN in the first parameter (an overflowing update)."""
    real_step = optimizer.step

    def overflowing_step(*args, **kwargs):
        result = real_step(*args, **kwargs)
        with torch.no_grad():
            next(iter(optimizer.param_groups[0]["params"])).view(-1)[0] = math.nan
        monkeypatch.setattr(optimizer, "step", real_step)  # once
        return result

    monkeypatch.setattr(optimizer, "step", overflowing_step)


def test_non_finite_parameters_after_the_update_fail_naming_the_update(monkeypatch):
    """Not "parameters differ across processes" (NaN never equals NaN): the update overflowed."""
    world, session, iterators = hosted_session("topk")
    step(world, session, iterators, 0, None)
    poison_the_next_update(monkeypatch, session.optimizer)
    with pytest.raises(NonFiniteValue, match=r"^non-finite parameters after the optimizer step at step 1 \(the same on every "
                                             r"rank\): the aggregate was finite, so the update overflowed: lower optimizer\.lr"):
        step(world, session, iterators, 1, None)


def test_non_finite_parameters_with_skip_undo_the_update_too(monkeypatch):
    """Parameters and the optimizer's momentum, as well as everything the other skips restore."""
    world, session, iterators = hosted_session("topk")
    guard = SkipGuard(max_in_a_row=10)
    for number in range(2):
        step(world, session, iterators, number, guard)
    before = state_of(session)
    assert before["optimizer"]["state"], "momentum buffers exist: their restoring is tested"
    poison_the_next_update(monkeypatch, session.optimizer)
    outcome = step(world, session, iterators, 2, guard)
    assert outcome.skipped == SkippedStep(2, None, PARAMETERS)
    after = state_of(session)
    for key in before:
        assert equal(before[key], after[key]), key
    assert step(world, session, iterators, 3, guard).skipped is None  # and the run goes on


def test_more_skipped_steps_in_a_row_than_allowed_fail_the_run():
    guard = SkipGuard(max_in_a_row=2)
    skipped = SkippedStep(5, 1, "gradient")
    for _ in range(2):
        guard.count(skipped)
        guard.fail_past_limit(skipped)
    guard.count(None)  # a good step resets the count in a row, not the total
    for _ in range(2):
        guard.count(skipped)
        guard.fail_past_limit(skipped)
    guard.count(skipped)
    with pytest.raises(NonFiniteValue, match="3 steps in a row skipped .*max_skipped_steps=2.*non-finite gradient at step 5 on rank 1"):
        guard.fail_past_limit(skipped)
    assert guard.total == 5


def read_rows(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / run_files.METRICS).read_text().splitlines()]


@pytest.mark.slow
def test_a_nan_gradient_with_skip_ends_done_with_the_step_logged_as_skipped(tmp_path):
    """2 processes: the ranks agree before any exchange. (Hosted: the test above, and the CLI
    run below with processes=1.)"""
    run_dir, processes = tmp_path / "run", 2
    result = run_cli([*TINY_RUN, "workers=2", f"processes={processes}", "max_steps=8", "on_nonfinite=skip",
                      "sparsifier._target_=tests.helpers.fault_injection.NaNGradientTopK",
                      f"+sparsifier.nan_rank={BAD_RANK}", f"+sparsifier.nan_step={BAD_STEP}",
                      f"hydra.run.dir={run_dir}"], timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert run_files.read_json(run_dir / run_files.STATUS)["status"] == "done"
    assert f"step {BAD_STEP} skipped (non-finite gradient at step {BAD_STEP} on rank {BAD_RANK}" in result.stderr
    train = [r for r in read_rows(run_dir) if r["kind"] == "train"]
    assert [r["step"] for r in train] == list(range(8))
    assert [r["train/skipped"] for r in train] == [1.0 if r["step"] == BAD_STEP else 0.0 for r in train]
    assert train[BAD_STEP]["train/skipped_rank"] == BAD_RANK and "traffic/sent_bytes_max" not in train[BAD_STEP]
    assert all(math.isfinite(r["train/loss"]) for r in train if r["step"] != BAD_STEP)
    summary = run_files.read_json(run_dir / run_files.SUMMARY)
    assert summary["train/skipped_steps"] == 1 and math.isfinite(summary["eval/loss"])


def test_a_diverged_run_with_skip_fails_after_the_allowed_skips_in_a_row(tmp_path):
    """lr = 1e6: the parameters blow up, then every step is non-finite; skip does not hide it."""
    run_dir = tmp_path / "run"
    result = run_cli([*TINY_RUN, "workers=2", "processes=1", "max_steps=30", "optimizer.lr=1e6",
                      "on_nonfinite=skip", "max_skipped_steps=3", f"hydra.run.dir={run_dir}"], timeout=180)
    assert result.returncode == 1
    status = run_files.read_json(run_dir / run_files.STATUS)
    assert status["status"] == "failed" and "4 steps in a row skipped" in status["error"], status["error"]
    skipped = [r["step"] for r in read_rows(run_dir) if r.get("train/skipped") == 1.0]
    assert len(skipped) == 4 and skipped == list(range(skipped[0], skipped[0] + 4))
