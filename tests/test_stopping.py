"""Stopping a run: a signal to run.py, to torchrun or to one rank, the death of any of them, or a
stopped rank, ends every process of the job within seconds (checked by command line and by
process tree), and status.json says how it ended: which process got which signal. Real runs
through the command line."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.runformat import run_dir as run_files
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


def alive(pid: int) -> bool:
    """Running (or stopped): a zombie has ended and only waits to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def process_tree(root: int) -> set[int]:
    """Every process below `root` (run.py: the job's processes), by parent pid, now."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    tree, todo = set(), list(children.get(root, []))
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo.extend(children.get(pid, []))
    return tree


def rank_pid(run_dir: Path, rank: int) -> int:
    """The pid of the worker process started as RANK=`rank`."""
    for pid in job_processes(run_dir):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"experiments.engine.rank.worker" in Path(f"/proc/{pid}/cmdline").read_bytes() and f"RANK={rank}".encode() in environ:
            return pid
    raise AssertionError(f"no process of rank {rank} among {job_processes(run_dir)}")


def agent_pid(run_dir: Path) -> int:
    agents = [pid for pid in job_processes(run_dir)
              if b"experiments.engine.launcher.agent" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(agents) == 1, job_processes(run_dir)
    return agents[0]


def kill_tree(pids: set[int]) -> None:
    """Clean-up after a failed assertion: no test leaves a process behind."""
    for pid in pids:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def start_run(run_dir: Path, processes: int, *extra: str, wandb_mode: str = "disabled") -> subprocess.Popen:
    env = {**os.environ, "WANDB_MODE": wandb_mode}
    process = subprocess.Popen([sys.executable, "run.py", *LONG_RUN, f"processes={processes}", *extra,
                                f"hydra.run.dir={run_dir}"], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:  # training has started once rank 0 logged a step
        metrics = run_dir / run_files.METRICS
        if metrics.exists() and metrics.read_text().count("\n") >= 2:
            return process
        assert process.poll() is None, process.communicate()
        time.sleep(0.2)
    process.kill()
    raise AssertionError("the run did not start training within 120 s")


def wait_until_gone(run_dir: Path, tree: set[int] | None = None, deadline_s: float = DEADLINE_S,
                    start: float | None = None) -> float:
    """Waits until no process of the job is left, by command line and, given `tree` (the
    process tree of the job while it ran), by pid; fails after `deadline_s` from `start`."""
    start = time.time() if start is None else start
    while job_processes(run_dir) or [pid for pid in tree or () if alive(pid)]:
        left = job_processes(run_dir) + [pid for pid in tree or () if alive(pid)]
        assert time.time() - start < deadline_s, f"still alive after {deadline_s} s: {left}"
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
    status = run_files.read_json(run_dir / run_files.STATUS)
    assert status["status"] == "failed" and status["signal"] == sig.name
    assert f"stopped by {sig.name} to run.py" in status["error"]


@pytest.mark.parametrize("processes", [1, 2])
def test_killing_run_py_takes_its_job_with_it(tmp_path, processes):
    run_dir = tmp_path / "run"
    process = start_run(run_dir, processes)
    tree = process_tree(process.pid)
    try:
        process.kill()  # SIGKILL: no handler runs; the kernel tells the children
        process.wait()
        wait_until_gone(run_dir, tree)
        # torchrun (or the single worker) outlived run.py long enough to say so
        status = run_files.read_json(run_dir / run_files.STATUS)
        assert status["status"] == "failed" and f"run.py (pid {process.pid}) died" in status["error"], status
    finally:
        kill_tree(tree)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_signal_to_torchrun_takes_the_ranks_with_it_and_names_torchrun(tmp_path, sig):
    run_dir = tmp_path / "run"
    process = start_run(run_dir, 2)
    tree = process_tree(process.pid)
    try:
        agent = agent_pid(run_dir)
        assert len(job_processes(run_dir)) == 3, job_processes(run_dir)
        os.kill(agent, sig)
        wait_until_gone(run_dir, tree)
        process.wait(timeout=30)
        assert process.returncode == 1
        status = run_files.read_json(run_dir / run_files.STATUS)
        verb = "killed by" if sig == signal.SIGKILL else "got"
        assert status["status"] == "failed" and status["error"] == f"torchrun (pid {agent}) {verb} {sig.name}", status
        assert status["cause"]["process"] == "torchrun" and status["cause"]["signal"] == sig.name
    finally:
        kill_tree(tree)


@pytest.mark.parametrize(("sig", "rank", "processes"), [(signal.SIGKILL, 2, 4), (signal.SIGTERM, 1, 2)])
def test_a_signal_to_one_rank_ends_the_job_and_is_its_cause(tmp_path, sig, rank, processes):
    """kill -9 of rank 2 of 4: the cause is rank 2 killed by SIGKILL, never its peers' "Connection
    reset by peer", which are consequences; every process is gone within the deadline."""
    run_dir = tmp_path / "run"
    process = start_run(run_dir, processes, f"workers={processes}")
    tree = process_tree(process.pid)
    try:
        victim = rank_pid(run_dir, rank)
        os.kill(victim, sig)
        wait_until_gone(run_dir, tree)
        process.wait(timeout=30)
        assert process.returncode == 1
        status = run_files.read_json(run_dir / run_files.STATUS)
        assert status["error"] == f"rank {rank} (pid {victim}) killed by {sig.name}", status
        assert status["cause"]["rank"] == rank and status["cause"]["signal"] == sig.name
        consequences = status["consequences"]
        assert all(failure["rank"] != rank or failure["kind"] == "teardown" for failure in consequences)
        assert all(failure["kind"] in ("peer", "teardown") for failure in consequences), consequences
    finally:
        kill_tree(tree)


def test_a_stopped_rank_ends_the_job_after_the_timeout_and_is_named(tmp_path):
    """SIGSTOP of one rank: its peers' collectives time out after launcher.timeout_s, torchrun
    tears the job down, and the stopped rank, continued, dies too: all within timeout + 10 s."""
    timeout_s = 5
    run_dir = tmp_path / "run"
    process = start_run(run_dir, 2, f"launcher.timeout_s={timeout_s}")
    tree = process_tree(process.pid)
    try:
        victim = rank_pid(run_dir, 1)
        stopped_at = time.time()
        os.kill(victim, signal.SIGSTOP)
        elapsed = wait_until_gone(run_dir, tree, deadline_s=timeout_s + DEADLINE_S, start=stopped_at)
        process.wait(timeout=30)
        assert elapsed > timeout_s - 1  # it was the timeout that ended it
        status = run_files.read_json(run_dir / run_files.STATUS)
        assert status["status"] == "failed" and status["cause"]["kind"] == "stopped", status
        assert status["error"].startswith(f"rank 1 (pid {victim}) was stopped"), status["error"]
        assert f"launcher.timeout_s={timeout_s}" in status["error"]
        assert any("Timed out" in (failure["error"] or "") for failure in status["consequences"])
    finally:
        kill_tree(tree)


def test_a_parent_killed_but_not_yet_gone_counts_as_dead():
    """outlived() must not wait on getppid() alone: a SIGKILLed run.py with many threads names
    itself the parent for a while. A zombie or vanished process is dying; a live one is not."""
    from experiments.engine.rank.lifetime import _dying

    child = subprocess.Popen(["sleep", "30"])
    try:
        assert not _dying(child.pid) and not _dying(os.getpid())
        child.kill()
        deadline = time.time() + 5
        while not _dying(child.pid) and time.time() < deadline:  # a zombie until reaped
            time.sleep(0.01)
        assert _dying(child.pid)
    finally:
        child.kill()
        child.wait()
    assert _dying(child.pid)  # reaped: gone
