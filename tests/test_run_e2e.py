"""The real command line, end to end: run.py composes, launches torchrun ranks (gloo), and the
run directory is read back and checked against the metric contract."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import yaml

from experiments.runformat import run_dir as run_files
from experiments.engine.launcher.environment import cpu_model
from experiments.runformat.run_dir import read_metrics
from tests.conftest import SWEEP, TINY_RUN, run_cli, sweep_stdout

pytestmark = pytest.mark.slow

CONTRACT = {
    "time/select_ms_max", "time/select_ms_mean", "time/exchange_ms", "time/compute_ms_max", "time/compute_ms_mean",
    "time/step_ms", "traffic/sent_bytes_max", "traffic/sent_bytes_mean", "traffic/recv_bytes_max",
    "traffic/recv_bytes_mean", "traffic/dense_bytes", "traffic/ratio", "density/actual", "density/target",
    "density/error", "buildup", "selection/overlap", "selection/k_max", "selection/k_mean",
    "selection/load_imbalance", "ef/residual_norm", "ef/rel_residual", "train/loss",
}


def load_run(run_dir: Path) -> tuple[dict, list[dict], list[dict], dict]:
    status = run_files.read_json(run_dir / run_files.STATUS)
    records = read_metrics(run_dir / run_files.METRICS)
    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval"]
    summary = run_files.read_json(run_dir / run_files.SUMMARY)
    return status, train, evals, summary


def test_short_run_fills_the_results_store_and_wandb_offline(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(
        [*TINY_RUN, "logger=wandb_offline", "logger.log_every=1", "workers=4", "epochs=2", "max_steps=14",
         "sparsifier=topk", "sparsifier.density=0.01", f"hydra.run.dir={run_dir}"],
        env={"WANDB_MODE": "offline", "WANDB_API_KEY": "secret-key-must-not-leak-0123456789"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    status, train, evals, summary = load_run(run_dir)
    assert status["status"] == "done"

    # config and environment
    config = yaml.safe_load((run_dir / run_files.CONFIG).read_text())
    assert config["workers"] == 4 and config["sparsifier"]["name"] == "topk"
    env = run_files.read_json(run_dir / run_files.ENV)
    assert env["resolved"]["world"] == "distributed" and env["resolved"]["backend"] == "gloo"
    assert env["versions"]["torch"] and "commit" in env["git"] and env["host"]
    # what makes float results differ across machines (docs/reproducibility.md)
    assert env["device"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert env["device"]["cpu_model"] == cpu_model() and env["device"]["blas"]

    # metrics: every step logged, the whole contract present, values consistent with each other
    assert [r["step"] for r in train] == list(range(14))
    assert len(evals) == 2 and 0.0 <= evals[-1]["eval/accuracy"] <= 1.0
    numel, k = summary["numel"], summary["k_target"]
    for row in train:
        assert CONTRACT <= row.keys()
        assert row["selection/k_mean"] == k == row["selection/k_max"]
        union = row["density/actual"] * numel
        assert row["density/error"] == pytest.approx(union / k - 1)
        assert row["buildup"] == pytest.approx(union / k)  # top-k: |U| / mean |S_r|
        assert 1.0 < row["buildup"] <= 4.0  # four ranks rarely agree on every index
        assert row["traffic/ratio"] == pytest.approx(row["traffic/sent_bytes_mean"] / row["traffic/dense_bytes"])
        assert row["time/select_ms_max"] >= row["time/select_ms_mean"] > 0
        assert 0.0 < row["ef/rel_residual"] < 1.0
    assert summary["buildup"] == pytest.approx(sum(r["buildup"] for r in train) / len(train))

    # what a person sees
    assert "accuracy" in result.stdout and "summary (topk, 4 workers" in result.stdout
    assert "build-up |U| / selection (mean)" in result.stdout and str(run_dir) in result.stdout

    # W&B offline run in the run directory; no secret in any file written
    offline = list((run_dir / run_files.WANDB_DIR).glob("offline-run-*"))
    assert offline and list(offline[0].glob("*.wandb"))
    for path in run_dir.rglob("*"):
        if path.is_file() and path.stat().st_size < 5_000_000:
            assert b"secret-key-must-not-leak" not in path.read_bytes(), path


def test_sweep_gives_one_complete_run_directory_per_job(sweep):
    # Hosted ranks: what a sweep adds is its jobs' directories, group and report, the same
    # whichever processes host the ranks (the other tests here run gloo processes). The session's
    # real sweep (conftest.SWEEP: dense and Top-k at W = 2, 4, 12 steps logged every 2), which the
    # analysis tests read too: one launch of run.py -m for both.
    run_dirs = sorted(p.parent for p in sweep.glob("*/status.json"))
    assert len(run_dirs) == 4
    by_job = {}
    for run_dir in run_dirs:
        status, train, evals, summary = load_run(run_dir)
        # every second step logged, and the last
        assert status["status"] == "done" and [r["step"] for r in train] == [*range(0, 12, 2), 11] and evals
        config = yaml.safe_load((run_dir / run_files.CONFIG).read_text())
        by_job[(config["sparsifier"]["name"], config["workers"])] = summary
        env = run_files.read_json(run_dir / run_files.ENV)
        assert env["job"]["group"] == run_dirs[0].parent.name  # one W&B group per sweep
    assert set(by_job) == {("dense", 2), ("dense", 4), ("topk", 2), ("topk", 4)}
    for workers in (2, 4):
        assert by_job[("dense", workers)]["traffic/ratio"] == pytest.approx(1.0)
        assert by_job[("dense", workers)]["buildup"] == pytest.approx(1.0)
    assert by_job[("topk", 4)]["buildup"] > by_job[("topk", 2)]["buildup"] > 1.0
    # the sweep ends with its comparison: printed, and saved with its figure
    report = run_dirs[0].parent / "report"
    stdout = sweep_stdout(sweep)
    assert "comparison of" in stdout and "build-up" in stdout
    assert (report / "report.md").is_file()
    assert (report / "method_comparison.png").read_bytes().startswith(b"\x89PNG")


def test_a_crash_in_one_rank_ends_the_job_and_marks_the_run_failed(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli([*TINY_RUN, "workers=4", "max_steps=20", "sparsifier._target_=tests.helpers.fault_injection.CrashingTopK",
                      "+sparsifier.crash_rank=2", "+sparsifier.crash_step=3", f"hydra.run.dir={run_dir}"], timeout=180)
    assert result.returncode == 1
    status = run_files.read_json(run_dir / run_files.STATUS)
    assert status["status"] == "failed"
    assert status["error"].startswith("rank 2: ") and "injected fault on rank 2 at step 3" in status["error"]
    assert status["cause"]["rank"] == 2 and all(c["rank"] != 2 for c in status["consequences"])
    records = read_metrics(run_dir / run_files.METRICS)  # what was logged before the crash is intact
    assert [r["step"] for r in records if r["kind"] == "train"] == [0, 1, 2]
    assert (run_dir / run_files.CONFIG).read_text().startswith("sparsifier:")
    assert not (run_dir / run_files.SUMMARY).exists()


def test_a_nan_gradient_fails_the_run_at_its_step_naming_the_rank(tmp_path):
    """Two processes; one process hosting both ranks is checked on the run
    tests/test_progress_lines.py launches (the same NaN at rank 1, step 3, under the bar)."""
    run_dir = tmp_path / "run"
    result = run_cli([*TINY_RUN, "workers=2", "processes=2", "max_steps=20", "logger.log_every=1",
                      "sparsifier._target_=tests.helpers.fault_injection.NaNGradientTopK",
                      "+sparsifier.nan_rank=1", "+sparsifier.nan_step=3", f"hydra.run.dir={run_dir}"], timeout=180)
    assert result.returncode == 1
    status = run_files.read_json(run_dir / run_files.STATUS)
    assert status["status"] == "failed"
    assert "non-finite gradient at step 3 on rank 1" in status["error"], status["error"]
    records = read_metrics(run_dir / run_files.METRICS)  # steps 0-2 are logged, and nothing after
    assert [r["step"] for r in records if r["kind"] == "train"] == [0, 1, 2]
    assert not (run_dir / run_files.SUMMARY).exists()


def test_non_finite_parameters_after_an_update_fail_at_that_step_with_2_processes(tmp_path):
    """NaN parameters on both processes used to be reported as "parameters differ across
    processes" (the checksum compares NaN with NaN). The update overflowed: the run says so, at
    the step it happened. (Hosted ranks: tests/test_skip_nonfinite.py.)"""
    run_dir = tmp_path / "run"
    result = run_cli([*TINY_RUN, "workers=2", "processes=2", "max_steps=20", "checksum_every=1",
                      "optimizer._target_=tests.helpers.fault_injection.NonFiniteUpdateSGD", "+optimizer.nan_step=2",
                      f"hydra.run.dir={run_dir}"], timeout=180)
    assert result.returncode == 1
    status = run_files.read_json(run_dir / run_files.STATUS)
    assert status["status"] == "failed"
    assert "non-finite parameters after the optimizer step at step 2" in status["error"], status["error"]
    assert "lower optimizer.lr" in status["error"] and "differ" not in status["error"]
    assert [r["step"] for r in read_metrics(run_dir / run_files.METRICS) if r["kind"] == "train"] == [0, 1]


def test_a_diverging_learning_rate_fails_at_the_first_non_finite_value(tmp_path):
    """lr = 1e6 used to end "done" with loss nan. Here the gradient overflows before the loss
    does, and the run fails at that step."""
    import re

    run_dir = tmp_path / "run"
    result = run_cli([*TINY_RUN, "workers=2", "processes=1", "max_steps=30", "optimizer.lr=1e6",
                      f"hydra.run.dir={run_dir}"], timeout=180)
    assert result.returncode == 1
    status = run_files.read_json(run_dir / run_files.STATUS)
    assert status["status"] == "failed", status
    found = re.search(r"non-finite (loss|gradient|aggregate) at step (\d+)", status["error"])
    assert found and "lower optimizer.lr" in status["error"], status["error"]
    logged = [r for r in read_metrics(run_dir / run_files.METRICS) if r["kind"] == "train"]
    assert [r["step"] for r in logged] == list(range(int(found.group(2))))  # every step before it, none after
    assert all(math.isfinite(r["train/loss"]) for r in logged)


# An existing run directory is never overwritten: tests/test_bad_input.py
# (test_an_existing_run_is_refused_and_left_untouched) launches run.py into one and checks exit
# code 2, the one line and every file byte-identical; a second launch here checked less.


def test_same_seed_same_config_gives_the_same_metrics(sweep, tmp_path):
    """A run launched again with one of the session's sweep's jobs (conftest.SWEEP: Top-k, W = 2,
    its seed the default) logs what that job logged, timings aside: the second launch of the same
    config is the sweep's own, one run.py start fewer (and a sweep's job and a single run agree)."""
    (first,) = sweep.glob("*_topk_w2")
    job = [arg for arg in SWEEP if arg != "-m" and "," not in arg]
    result = run_cli([*job, "sparsifier=topk", "workers=2", f"hydra.run.dir={tmp_path / 'again'}"])
    assert result.returncode == 0, result.stderr[-2000:]
    runs = []
    for run_dir in (first, tmp_path / "again"):
        records = read_metrics(run_dir / run_files.METRICS)
        runs.append([{k: v for k, v in r.items() if not k.startswith("time/")} for r in records])
    assert len(runs[0]) > 6 and runs[0] == runs[1]


def test_64_hosted_micro_ranks_train_one_epoch_of_the_default_dataset(tmp_path):
    """Issue 4's laptop claim: one process hosts 64 MiCRO ranks through a whole epoch of
    Fashion-MNIST (29 steps of 64 x 32 images), and their selections never overlap."""
    from datasets.fashion_mnist import locate

    if locate(None) is None:
        pytest.skip("Fashion-MNIST is not installed (make run installs Debian's dataset-fashion-mnist)")
    run_dir = tmp_path / "run"
    result = run_cli(["sparsifier=micro", "workers=64", "processes=1", "epochs=1", "logger=local",
                      "logger.progress=false", f"hydra.run.dir={run_dir}"], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    status, train, evals, summary = load_run(run_dir)
    assert status["status"] == "done" and summary["world"] == "hosted" and summary["workers"] == 64
    assert summary["steps"] == 60000 // 64 // 32 and len(evals) == 1
    assert summary["selection/overlap"] == pytest.approx(1.0) and summary["buildup"] == pytest.approx(1.0)
    assert all(row["selection/overlap"] == pytest.approx(1.0) for row in train)
