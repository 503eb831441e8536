"""A failed run's W&B offline record is valid and holds the failure, even when the rank that
held the W&B run was killed by SIGKILL and could write nothing (its own file keeps W&B's 7-byte
header): run.py, which outlives it, finishes the same run id with the logged rows, exit code 1
and summary["failure"]. The records are read with W&B's own format (tests/helpers/wandb_records.py)."""
from __future__ import annotations

import json
import os
import signal

import pytest

from experiments.runformat import run_dir as run_files
from experiments.runformat.run_dir import read_metrics
from tests.test_stopping import kill_tree, process_tree, rank_pid, start_run, wait_until_gone
from tests.helpers.wandb_records import records

pytestmark = pytest.mark.slow


def summary_items(run_records) -> dict[str, str]:
    items = {}
    for record in run_records:
        if record.WhichOneof("record_type") == "summary":
            for update in record.summary.update:
                items[update.key or "/".join(update.nested_key)] = update.value_json
    return items


def test_rank_zero_killed_leaves_a_valid_wandb_record_with_the_failure(tmp_path):
    run_dir = tmp_path / "run"
    process = start_run(run_dir, 2, "logger=wandb_offline", wandb_mode="offline")
    tree = process_tree(process.pid)
    try:
        victim = rank_pid(run_dir, 0)  # rank 0 holds the W&B run
        os.kill(victim, signal.SIGKILL)
        wait_until_gone(run_dir, tree)  # the job's processes, W&B's service of rank 0 too
        process.wait(timeout=60)  # run.py records the failure into W&B, then ends
        assert process.returncode == 1
    finally:
        kill_tree(tree)
    note = json.loads((run_dir / run_files.WANDB_RUN).read_text())
    files = sorted(run_dir.glob(f"wandb/offline-run-*-{note['id']}/run-{note['id']}.wandb"))
    assert len(files) == 2, files  # rank 0's own (cut short) and run.py's, for the same run id
    finished = records(files[-1])
    kinds = [record.WhichOneof("record_type") for record in finished]
    assert kinds.count("exit") == 1
    assert next(r.exit for r in finished if r.WhichOneof("record_type") == "exit").exit_code == 1
    failure = json.loads(summary_items(finished)["failure"])
    assert failure == f"rank 0 (pid {victim}) killed by SIGKILL"
    assert run_files.read_json(run_dir / run_files.STATUS)["error"] == failure
    logged = {r.history.step.num for r in finished if r.WhichOneof("record_type") == "history"}
    assert logged == {row["step"] for row in read_metrics(run_dir / run_files.METRICS)} and len(logged) >= 2
    assert "run" in kinds and any(r.run.config.update for r in finished if r.WhichOneof("record_type") == "run")
