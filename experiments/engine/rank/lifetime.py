"""A job's processes live and die together.

run.py starts torchrun (or the single worker) in a process group of its own, and:
- a signal to run.py (SIGTERM, SIGHUP, Ctrl-C) is passed to that whole group; whatever is still
  alive after STOP_GRACE_S is killed, so nothing outlives the job;
- every process of the job asks the kernel for a signal when its parent dies
  (PR_SET_PDEATHSIG): torchrun gets SIGTERM when run.py is killed, even by SIGKILL, which no
  handler sees, and a rank gets SIGKILL when torchrun dies, instead of training on as an orphan;
- torchrun (agent.py) or the single worker, when it outlives run.py, marks the run failed
  (`mark_orphaned`): nobody else is left to say so.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

STOP_GRACE_S = 5.0  # torchrun stops its ranks on SIGTERM within this, or they are killed
FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
PR_SET_PDEATHSIG = 1
STATUS_VARIABLE = "SPARSEBENCH_STATUS_FILE"  # the status file torchrun (or the single worker) marks if run.py dies first


def die_with_parent(sig: signal.Signals) -> None:
    """Asks Linux to send `sig` to this process when its parent exits (elsewhere: nothing)."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig))
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), sig)


class Stopped(Exception):
    """run.py got a signal: the job was stopped, and so is what would have come after it."""

    def __init__(self, sig: signal.Signals) -> None:
        super().__init__(f"stopped by {sig.name} to run.py (pid {os.getpid()})")
        self.signal = sig


def run_job(command: list[str], env: dict[str, str], cwd: str) -> tuple[int, signal.Signals | None, int]:
    """Runs `command` in its own process group; returns its exit code, the signal run.py got
    while it ran (None if none) and its pid. On a signal the group is stopped before this returns."""
    received: list[signal.Signals] = []

    def forward(signum, frame) -> None:
        received.append(signal.Signals(signum))
        _signal_group(process.pid, signal.SIGTERM)

    process = subprocess.Popen(command, env=env, cwd=cwd, start_new_session=True,
                               preexec_fn=lambda: die_with_parent(signal.SIGTERM))
    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        while True:
            try:
                returncode = process.wait(timeout=STOP_GRACE_S if received else None)
                break
            except subprocess.TimeoutExpired:
                _signal_group(process.pid, signal.SIGKILL)
        if received:
            _signal_group(process.pid, signal.SIGKILL)  # stragglers of the group, if any
        return returncode, (received[0] if received else None), process.pid
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def outlived(parent: int, wait_s: float = 1.0) -> bool:
    """Whether the parent (run.py, pid `parent`) has died. A process killed by SIGKILL loses its
    threads one by one, and its child is first handed to a surviving thread of the same process
    (and gets its death signal then), so getppid() can still name the parent for a while: on a
    loaded machine longer than `wait_s`. A parent that is a zombie, gone, or has SIGKILL pending
    is dying too; one that is none of these within `wait_s` is alive (it passed a signal on)."""
    deadline = time.time() + wait_s
    while os.getppid() == parent and not _dying(parent):
        if time.time() > deadline:
            return False
        time.sleep(0.02)
    return True


def _dying(pid: int) -> bool:
    """/proc says `pid` is gone, a zombie, or about to be: SIGKILL pending for it."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    except OSError:
        return True
    if fields.get("State", "").strip()[:1] in ("Z", "X"):
        return True
    kill_bit = 1 << (int(signal.SIGKILL) - 1)
    return any(int(fields.get(mask, "0").strip() or "0", 16) & kill_bit for mask in ("SigPnd", "ShdPnd"))


def mark_orphaned(parent: int, then: str) -> None:
    """run.py (pid `parent`) died before this process (torchrun, or the single worker): nobody
    else is left to say so. `then`: what this process did about it."""
    path = os.environ.get(STATUS_VARIABLE)
    if not path:
        return
    from experiments.engine.rank.nodes import hosts_rank_zero
    from experiments.runformat.run_dir import STATUS
    from experiments.runformat.store import RunStore  # only when run.py died: neither is needed otherwise

    error = f"run.py (pid {parent}) died without stopping the job (killed, e.g. by SIGKILL); {then}"
    cause = {"text": error, "process": "run.py", "kind": "signal", "pid": parent, "signal": None}
    store = RunStore(os.path.dirname(path))
    names = {os.path.basename(path)}
    if hosts_rank_zero(store.dir, os.getpid()):  # several nodes: the run's own status.json is this node's too
        names.add(STATUS)
    for name in sorted(names):
        store.set_status("failed", name=name, ended=time.time(), error=error, cause=cause, consequences=[])

