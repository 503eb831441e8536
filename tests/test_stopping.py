"""Stopping a run: a signal to run.py, or the death of run.py or torchrun, ends every process of
the job within seconds, and the run says how it ended. Real runs through the command line."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import TINY_RUN

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
LONG_RUN = [*TINY_RUN, "workers=2", "epochs=50", "sparsifier=topk"]
DEADLINE_S = 10.0


def job_processes(run_dir: Path) -> list[int]:
    """Pids whose command line names the run directory: torchrun and the ranks."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(run_dir) in cmdline and "run.py" not in cmdline:
                pids.append(int(entry.name))
    return pids


def start_run(run_dir: Path, processes: int) -> subprocess.Popen:
    env = {**os.environ, "WANDB_MODE": "disabled"}
    process = subprocess.Popen([sys.executable, "run.py", *LONG_RUN, f"processes={processes}",
                                f"hydra.run.dir={run_dir}"], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:  # training has started once rank 0 logged a step
        metrics = run_dir / "metrics.jsonl"
        if metrics.exists() and metrics.read_text().count("\n") >= 2:
            return process
        assert process.poll() is None, process.communicate()
        time.sleep(0.2)
    process.kill()
    raise AssertionError("the run did not start training within 120 s")


def wait_until_gone(run_dir: Path) -> float:
    start = time.time()
    while job_processes(run_dir):
        assert time.time() - start < DEADLINE_S, f"still alive after {DEADLINE_S} s: {job_processes(run_dir)}"
        time.sleep(0.1)
    return time.time() - start


@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_run_py_stops_every_process_and_is_recorded(tmp_path, sig, processes):
    run_dir = tmp_path / "run"
    process = start_run(run_dir, processes)
    assert job_processes(run_dir)
    process.send_signal(sig)
    process.wait(timeout=DEADLINE_S + 5)
    wait_until_gone(run_dir)
    assert process.returncode == 128 + int(sig)
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "failed" and status["signal"] == sig.name
    assert f"stopped by {sig.name} to run.py" in status["error"]


@pytest.mark.parametrize("processes", [1, 2])
def test_killing_run_py_takes_its_job_with_it(tmp_path, processes):
    run_dir = tmp_path / "run"
    process = start_run(run_dir, processes)
    process.kill()  # SIGKILL: no handler runs; the kernel tells the children
    process.wait()
    wait_until_gone(run_dir)


def test_killing_torchrun_takes_the_ranks_with_it(tmp_path):
    run_dir = tmp_path / "run"
    process = start_run(run_dir, 2)
    ranks_and_agent = job_processes(run_dir)
    agent = [pid for pid in ranks_and_agent
             if b"torch.distributed.run" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(agent) == 1 and len(ranks_and_agent) == 3, ranks_and_agent
    os.kill(agent[0], signal.SIGKILL)
    wait_until_gone(run_dir)
    process.wait(timeout=30)
    assert process.returncode != 0
    assert json.loads((run_dir / "status.json").read_text())["status"] == "failed"
