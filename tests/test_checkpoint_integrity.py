"""A damaged checkpoint (cut short, a byte changed, a process file gone) is found by `resume=`
before any process starts: the run resumes from the newest intact one, saying in one line which
it skipped, or is refused in a few lines when none is intact. Nothing is deleted or changed.
A marker an older sparsebench wrote (no sizes or checksums) still loads.
The shared run evaluates near its target from step 10 on, so a resume from step 24 lands inside
the band: its evaluations must be the uninterrupted run's (experiments/engine/rank/target.py), for
a run stopped there with nothing damaged too (issue 45, item 3).
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from experiments.runformat import run_dir as run_files
from experiments.engine.rank.checkpoint import complete_steps, step_dir
from experiments.runformat.checkpoint_integrity import Damage, newest_intact
from experiments.runformat.run_dir import read_metrics
from tests.conftest import TINY_RUN, run_cli
from tests.test_resume import assert_same_run, without_timings

# Checkpoints every 4 steps and at the epoch's end (22), 3 kept: 22, 24 and 28. Evaluations every
# 10 steps, and every 3 from the first within 1.0 of an unreachable target (step 10) on.
NEAR = ["eval_every_steps=10", "eval_target=0.999", "eval_near=1.0", "eval_near_every=3"]
RUN = [*TINY_RUN, "model=mlp", "workers=2", "processes=1", "epochs=2", "max_steps=30", "checkpoint.every_steps=4",
       "checkpoint.keep=3", *NEAR]
NEWEST, PREVIOUS = 28, 24


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """The uninterrupted run, whose checkpoints the tests damage in copies."""
    run_dir = tmp_path_factory.mktemp("integrity") / "run"
    result = run_cli([*RUN, f"hydra.run.dir={run_dir}"])
    assert result.returncode == 0, result.stderr
    assert complete_steps(run_dir) == [22, 24, NEWEST]
    return run_dir


def stopped_copy(finished: Path, where: Path) -> Path:
    """A copy of the run as if it had been stopped after its last checkpoint."""
    shutil.copytree(finished, where)
    status = run_files.read_json(where / run_files.STATUS)
    status["status"] = "failed"
    run_files.write_json(where / run_files.STATUS, status)
    return where


def cut(path: Path) -> str:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return "(cut short)"


def flip(path: Path) -> str:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return "does not match the marker's SHA-256"


FILE = run_files.checkpoint_process_file(0)  # the one process's file


def remove(path: Path) -> str:
    path.unlink()
    return f"{FILE} is missing"


DAMAGES = {"cut": cut, "flipped": flip, "missing": remove}


def process_file(run_dir: Path, step: int) -> Path:
    return step_dir(run_dir, step) / FILE


def digests(run_dir: Path, leave_out: tuple[str, ...] = ()) -> dict[str, str]:
    return {str(path.relative_to(run_dir)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(run_dir.rglob("*")) if path.is_file() and path.name not in leave_out}


def test_the_marker_records_every_process_file(finished):
    marker = json.loads((step_dir(finished, NEWEST) / run_files.CHECKPOINT_MARKER).read_text())
    data = process_file(finished, NEWEST).read_bytes()
    assert marker["files"] == {FILE: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}}


@pytest.mark.slow  # a real resume
@pytest.mark.parametrize("kind", DAMAGES)
def test_a_damaged_checkpoint_resumes_from_the_previous_one(finished, tmp_path, kind):
    run_dir = stopped_copy(finished, tmp_path / "run")
    says = DAMAGES[kind](process_file(run_dir, NEWEST))
    damaged_before = digests(step_dir(run_dir, NEWEST))
    result = run_cli([f"resume={run_dir}"])
    assert result.returncode == 0, result.stderr
    skipped = [line for line in result.stdout.splitlines() if line.startswith("skipping damaged checkpoint")]
    assert len(skipped) == 1 and f"step {NEWEST}: " in skipped[0] and says in skipped[0]
    assert skipped[0].endswith(f"resuming from step {PREVIOUS}") and "Traceback" not in result.stderr
    status = run_files.read_json(run_dir / run_files.STATUS)
    assert status["status"] == "done" and [d["step"] for d in status["damaged_checkpoints"]] == [NEWEST]
    assert digests(step_dir(run_dir, NEWEST)) == damaged_before  # left as it was, not overwritten
    assert_same_run(finished, run_dir)  # the evaluations inside the band included


@pytest.mark.parametrize("kind", DAMAGES)
def test_no_intact_checkpoint_is_refused_cleanly(finished, tmp_path, kind, run_py_before_launch):
    run_dir = stopped_copy(finished, tmp_path / "run")
    for step in complete_steps(run_dir):
        DAMAGES[kind](process_file(run_dir, step))
    before = digests(run_dir, leave_out=(run_files.STATUS, run_files.RESUME_LOCK))
    result = run_py_before_launch([f"resume={run_dir}"])
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) <= 3 and "no intact checkpoint" in lines[0]
    assert all(f"step {step}: " in lines[0] for step in (22, 24, NEWEST))
    # No process ran and nothing moved (the lock file aside: any resume= takes it).
    assert digests(run_dir, leave_out=(run_files.STATUS, run_files.RESUME_LOCK)) == before
    status = run_files.read_json(run_dir / run_files.STATUS)
    assert status["status"] == "failed" and len(status["damaged_checkpoints"]) == 3


def evaluations(run_dir: Path) -> list[dict]:
    """The run's eval rows, timings aside."""
    return [without_timings(r) for r in read_metrics(run_dir / run_files.METRICS) if r["kind"] == "eval"]


def test_the_resumed_run_evaluates_inside_the_band(finished):
    """The shared run is inside the band at the checkpoint the resumes start from: its next
    evaluation (26, after 27 steps) is the near cadence's, not eval_every_steps' (30: the end)."""
    assert [row["step"] for row in evaluations(finished) if row["step"] >= PREVIOUS] == [26, 29]


def with_older_markers(run_dir: Path) -> Path:
    """The run's markers rewritten as ac091f3 wrote them: no sizes, no SHA-256s."""
    for step in complete_steps(run_dir):
        marker = step_dir(run_dir, step) / run_files.CHECKPOINT_MARKER
        marker.write_text(json.dumps({"step": step, "processes": 1}) + "\n")
    return run_dir


@pytest.fixture(scope="module")
def stopped_in_band(finished, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One resume, two tests: a run stopped before step 28's marker was written (its files
    unmarked, as a kill leaves them), its markers as an older sparsebench wrote them, resumed from
    step 24, inside the band."""
    run_dir = with_older_markers(stopped_copy(finished, tmp_path_factory.mktemp("band") / "run"))
    (step_dir(run_dir, NEWEST) / run_files.CHECKPOINT_MARKER).unlink()
    return run_dir, run_cli([f"resume={run_dir}"])


@pytest.mark.slow  # a real resume
def test_an_older_marker_without_checksums_still_loads(stopped_in_band):
    run_dir, result = stopped_in_band
    assert result.returncode == 0, result.stderr
    assert f"from step {PREVIOUS}" in result.stdout and "skipping" not in result.stdout
    assert run_files.read_json(run_dir / run_files.STATUS)["status"] == "done"


def test_an_older_markers_files_are_checked_for_being_there(finished, tmp_path):
    run_dir = with_older_markers(stopped_copy(finished, tmp_path / "run"))
    assert newest_intact(run_dir, complete_steps(run_dir)) == (NEWEST, [])
    says = remove(process_file(run_dir, NEWEST))  # what can be checked without sizes
    assert newest_intact(run_dir, complete_steps(run_dir)) == (PREVIOUS, [Damage(NEWEST, says)])


@pytest.mark.slow  # a real resume
def test_a_run_stopped_inside_the_band_logs_the_same_evaluations(finished, stopped_in_band):
    """The band comes from the checkpoint, so the resumed run evaluates at the same steps, with
    the same values, as the run never stopped. ac091f3 started far from the target again and
    evaluated next at the end, 29, leaving out 26."""
    run_dir, result = stopped_in_band
    assert result.returncode == 0, result.stderr
    assert evaluations(run_dir) == evaluations(finished)
    assert_same_run(finished, run_dir)
