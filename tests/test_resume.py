"""Exact resume: a run stopped at a step and continued from its checkpoint ends with the same
parameters and logs the same metrics (timings aside) as a run never stopped.

- every sparsifier, hosted (one process, W = 4) and distributed (two gloo processes): stopped
  twice, once resuming at an epoch boundary and once mid-epoch (tests/helpers/resume_harness.py);
- through the command line: SIGTERM to run.py at a step, then `python run.py resume=DIR`;
  a rank killed by SIGKILL with launcher.max_restarts=1, which torchrun restarts from the
  checkpoint on its own;
- the checkpoint files themselves: atomic, pruned to `keep`, unmarked ones ignored.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from experiments.runformat import run_dir as run_files
from experiments.engine.rank.checkpoint import FORMAT, complete_steps, load_agreed, step_dir
from experiments.runformat.run_dir import read_metrics
from tests.conftest import REPO, TINY_RUN, run_cli, run_world
from tests.helpers.specs import OKTOPK_PAPER, short_schedules

METHODS = short_schedules(sorted(path.stem for path in (REPO / "conf" / "sparsifier").glob("*.yaml")))
TIMING = ("time/", "wall_s")
NOT_RESULTS = ("wandb_mode",)  # where the rows went, which a test may choose per run


def without_timings(record: dict) -> dict:
    return {key: value for key, value in record.items() if not key.startswith(TIMING) and key not in NOT_RESULTS}


def assert_same_run(uninterrupted: Path, resumed: Path) -> None:
    """Same parameters (their digest), same metric lines in the same order, same summary."""
    expected = [without_timings(r) for r in read_metrics(uninterrupted / run_files.METRICS)]
    got = [without_timings(r) for r in read_metrics(resumed / run_files.METRICS)]
    assert [(r["step"], r["kind"]) for r in got] == [(r["step"], r["kind"]) for r in expected]
    for want, have in zip(expected, got):
        assert have == want, f"step {want['step']} ({want['kind']}) differs"
    summary_a = run_files.read_json(uninterrupted / run_files.SUMMARY)
    summary_b = run_files.read_json(resumed / run_files.SUMMARY)
    assert summary_b["parameters_sha256"] == summary_a["parameters_sha256"]
    assert without_timings(summary_b) == without_timings(summary_a)


def run_harness(out: Path, workers: int, processes: int, stops: tuple[int, ...], cases: list[str]) -> None:
    run_world([str(REPO / "tests" / "helpers" / "resume_harness.py"), str(out), f"--workers={workers}",
               f"--methods={','.join(cases)}", f"--stops={','.join(map(str, stops))}"], processes)


# (workers, processes, stops, cases). Checkpoints come every 5 steps and at epoch ends; an epoch
# is 11 steps at W = 4 and 22 at W = 2 (digits, batch 32), so at W = 4 the first stop resumes
# at an epoch boundary and the second mid-epoch; at W = 2 the other way round. Hosted, the LSTM
# (hidden state, dropout) resumes too, MiCRO's calibrated threshold start (resumed past step 0,
# it must not calibrate again), and Accordion detecting every epoch (resumed at step 11, a
# detection that compares with the norms and learning rate of step 0's, from the checkpoint), and
# SIDCo's adaptive stages (their 5-step average resumed mid-window), and Ok-Topk's paper variant
# (th_glob from its exact search, the regions repartitioned every 3 steps).
LAYOUTS = {"hosted-w4": (4, 1, (13, 18), [*METHODS, "topk+lstm", "micro:threshold_start=calibrated", "accordion:switch_freq=1",
                                       "sidco:stages=-2", OKTOPK_PAPER]),
           "distributed-w2": (2, 2, (24, 33), METHODS)}
EVERY = 5  # resume_harness.TINY's checkpoint.every_steps


@pytest.fixture(scope="module")
def harness_out(tmp_path_factory):
    """The harness's output for a layout, run once per layout for all its cases."""
    done: dict[str, Path] = {}

    def out_for(layout: str) -> Path:
        if layout not in done:
            workers, processes, stops, cases = LAYOUTS[layout]
            done[layout] = tmp_path_factory.mktemp(layout)
            run_harness(done[layout], workers, processes, stops, cases)
        return done[layout]

    return out_for


def resumed_from(stop: int, steps_per_epoch: int) -> int:
    """The newest checkpoint before `stop`."""
    return max(s for s in range(1, stop) if s % EVERY == 0 or s % steps_per_epoch == 0)


@pytest.mark.slow
@pytest.mark.parametrize("layout, case", [(layout, case) for layout, spec in LAYOUTS.items() for case in spec[3]])
def test_every_sparsifier_resumes_exactly(harness_out, layout, case):
    out, stops = harness_out(layout), LAYOUTS[layout][2]
    uninterrupted, interrupted = out / case / "uninterrupted", out / case / "interrupted"
    assert_same_run(uninterrupted, interrupted)
    # It did stop and resume where it should: the train rows logged after each checkpoint were
    # set aside, once per stop.
    steps_per_epoch = run_files.read_json(uninterrupted / run_files.SUMMARY)["steps"] // 2  # epochs=2
    dropped = [r["step"] for r in read_metrics(interrupted / run_files.DROPPED_METRICS) if r["kind"] == "train"]
    assert dropped == [s for stop in stops for s in range(resumed_from(stop, steps_per_epoch), stop)]
    assert complete_steps(interrupted) == complete_steps(uninterrupted)


def _start(args: list[str], wandb_mode: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "run.py", *args], cwd=REPO, env={**os.environ, "WANDB_MODE": wandb_mode},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_step(run_dir: Path, step: int, process: subprocess.Popen) -> None:
    deadline = time.time() + 120
    while time.time() < deadline:
        metrics = run_dir / run_files.METRICS
        if metrics.exists() and any(r["step"] >= step for r in read_metrics(metrics)):
            return
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    process.kill()
    raise AssertionError(f"no step {step} within 120 s")


CLI_RUN = [*TINY_RUN, "model=mlp", "workers=2", "epochs=3", "max_steps=50", "checkpoint.every_steps=7"]


@pytest.mark.slow
def test_sigterm_then_resume_from_the_command_line(tmp_path):
    """Hosted, with W&B offline: the resumed run continues the same W&B run (same id). (Two
    processes resume through the same worker code: the restart test below and the harness.)"""
    args = [*CLI_RUN, "sparsifier=micro", "processes=1"]
    wandb_mode = "offline"
    reference = tmp_path / "reference"
    assert run_cli([*args, f"hydra.run.dir={reference}"]).returncode == 0
    stopped = tmp_path / "stopped"
    process = _start([*args, f"hydra.run.dir={stopped}"], wandb_mode)
    _wait_for_step(stopped, 30, process)
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=30)
    assert run_files.read_json(stopped / run_files.STATUS)["status"] == "failed"
    last_checkpoint = complete_steps(stopped)[-1]
    assert last_checkpoint >= 28

    result = run_cli([f"resume={stopped}"], env={"WANDB_MODE": wandb_mode})
    assert result.returncode == 0, result.stderr
    assert f"from step {last_checkpoint}" in result.stdout
    status = run_files.read_json(stopped / run_files.STATUS)
    assert status["status"] == "done" and status["resumes"] == 1
    assert_same_run(reference, stopped)
    env = run_files.read_json(stopped / run_files.ENV)
    assert [r["from_step"] for r in env["resumes"]] == [last_checkpoint]
    # One W&B run, written three times (`wandb sync` joins them): the stopped attempt, run.py
    # recording how it was stopped (wandb_failure.py), and the resumed attempt.
    attempts = sorted((stopped / run_files.WANDB_DIR).glob("offline-run-*"))
    assert len(attempts) == 3
    assert {path.name.rsplit("-", 1)[1] for path in attempts} == {env["job"]["wandb_id"]}


@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 1], ids=["processes", "hosted"])
def test_torchrun_restart_resumes_from_the_checkpoint(tmp_path, processes):
    """A rank killed by SIGKILL at step 17: torchrun (max_restarts=1) starts the ranks again, and
    they continue from the checkpoint at step 14 on their own. Hosted (one process hosting both
    ranks), restarts make run.py start that process under torchrun too."""
    common = [*CLI_RUN, f"processes={processes}", "launcher.max_restarts=1"]
    reference = tmp_path / "reference"
    assert run_cli([*common, "sparsifier=topk", f"hydra.run.dir={reference}"]).returncode == 0
    marker = tmp_path / "killed-once"
    restarted = tmp_path / "restarted"
    result = run_cli([*common, "sparsifier=topk", "sparsifier._target_=tests.helpers.fault_injection.KilledOnceTopK",
                      "+sparsifier.kill_step=17", f"+sparsifier.marker={marker}", f"hydra.run.dir={restarted}"])
    assert result.returncode == 0, result.stderr
    assert marker.exists()  # the kill happened
    dropped = [r["step"] for r in read_metrics(restarted / run_files.DROPPED_METRICS)]
    assert dropped and min(dropped) == 14
    assert_same_run(reference, restarted)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A run that ended `done`, with checkpoints every 4 steps (22 steps an epoch), 3 kept."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    args = [*TINY_RUN, "model=mlp", "workers=2", "processes=1", "epochs=2", "max_steps=30", "checkpoint.every_steps=4",
            "checkpoint.keep=3", f"hydra.run.dir={run_dir}"]
    result = run_cli(args)
    assert result.returncode == 0, result.stderr
    return run_dir


@pytest.mark.slow  # real runs of run.py
def test_resume_refuses_what_it_cannot_resume(finished_run, tmp_path):
    # A run whose run.py is still alive (here: this test's own process) is not resumed under it.
    running = tmp_path / "running"
    shutil.copytree(finished_run, running)
    status = run_files.read_json(running / run_files.STATUS)
    status.update(status="running", pid=os.getpid(), host=socket.gethostname())
    run_files.write_json(running / run_files.STATUS, status)
    broken = tmp_path / "broken"
    shutil.copytree(finished_run, broken)
    (broken / run_files.STATUS).write_text('{"sta')  # cut by hand
    afile = tmp_path / "afile"
    afile.write_text("not a run")
    locked = tmp_path / "locked"
    shutil.copytree(finished_run, locked)
    status.update(status="failed", pid=None)
    run_files.write_json(locked / run_files.STATUS, status)
    lock = open(locked / run_files.RESUME_LOCK, "a")
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another run.py resuming it right now
    cases = [
        ([f"resume={running}"], f"that run is still running (run.py pid {os.getpid()})"),
        ([f"resume={locked}"], "another run.py is resuming that run right now"),
        ([f"resume={broken}"], "its status.json or env.json is not valid JSON"),
        ([f"resume={afile}"], "is a file: give a run directory"),
        ([f"resume={finished_run}"], "that run is done already"),
        ([f"resume={tmp_path / 'nothing'}"], "no run there"),
        ([f"resume={finished_run}", "workers=4"], "takes no other argument"),
        (["resume="], "resume needs a run directory"),
    ]
    for args, message in cases:
        result = run_cli(args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    lock.close()


def test_checkpoints_are_pruned_and_unmarked_ones_ignored(finished_run, tmp_path):
    # Every 4 steps and at the epoch's end (22), the newest 3 kept; none after the last step.
    assert complete_steps(finished_run) == [22, 24, 28]
    # A checkpoint cut by a kill has no marker: it does not count.
    copy = tmp_path / "copy"
    shutil.copytree(finished_run / run_files.CHECKPOINTS, copy / run_files.CHECKPOINTS)
    (step_dir(copy, 28) / run_files.CHECKPOINT_MARKER).unlink()
    assert complete_steps(copy) == [22, 24]


class _OneProcess:
    """The little of a World that loading a checkpoint uses: one process hosting ranks 0 and 1."""

    process_index, processes, world_size, local_ranks, device = 0, 1, 2, [0, 1], torch.device("cpu")

    class comm:  # noqa: N801 - the attribute World has
        @staticmethod
        def gather_stats(local: torch.Tensor) -> torch.Tensor:
            return local  # one process: its own row is every row


@pytest.mark.parametrize("written, says", [(1, "an older"), (99, "another")])
def test_a_checkpoint_of_another_format_says_so_and_names_its_file(tmp_path, written, says):
    run_dir = tmp_path / "run"
    path = step_dir(run_dir, 8) / run_files.checkpoint_process_file(0)
    path.parent.mkdir(parents=True)
    torch.save({"format": written, "step": 8}, path)  # format 1 had no layout keys to compare
    (path.parent / run_files.CHECKPOINT_MARKER).write_text("{}\n")
    with pytest.raises(RuntimeError) as error:
        load_agreed(run_dir, _OneProcess())
    assert str(error.value) == (f"checkpoint format {written} was written by {says} sparsebench (format {FORMAT} now): "
                                f"cannot resume {path}; start a new run")
    assert "layout of ranks" not in str(error.value)
