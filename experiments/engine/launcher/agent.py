"""torchrun, reporting how its job ended:
`python -m experiments.engine.launcher.agent <torchrun arguments> -m experiments.engine.rank.worker RUN_DIR`.

This is torchrun itself (`torch.distributed.run.main`, in this process) plus a report, written
as JSON to the path in $SPARSEBENCH_AGENT_REPORT when it ends, for run.py to say why a run
failed (blame.py):

- `failures`: the ranks torchrun saw exit non-zero, from its ChildFailedError, one entry per
  global rank: pid, local rank, exit code (negative: the signal that killed it, named) and the
  second it was seen. A rank killed by a signal writes nothing itself; this is the one place
  that knows it. Only ranks that failed on their own are listed: torchrun stops the others
  (SIGTERM) after the first failure it sees, and those are not failures.
- `signal`: the signal torchrun itself got (SIGTERM, SIGINT, SIGHUP), from its SignalException.
- `error`: torchrun's own failure, if it raised anything else (a rendezvous that timed out).
- `closed`: each rank torchrun itself stopped (SIGTERM, then SIGKILL) once the job failed; torchrun
  lists these among the failures too, but they are its teardown, not a cause.
- `stopped`: ranks that were stopped (SIGSTOP, Ctrl-Z; state T) when torchrun tore the job down.

When run.py dies without a word (SIGKILL), the kernel sends this process SIGTERM
(PR_SET_PDEATHSIG, lifetime.py), and this process, having outlived its parent, marks the run
failed itself ($SPARSEBENCH_STATUS_FILE), naming run.py's pid. The kernel sends that signal
again as each of run.py's threads dies: once torchrun has stopped, later ones are ignored.

One change to torchrun's behaviour: closing a rank also continues it (SIGCONT). A stopped rank
keeps torchrun's SIGTERM pending until it is continued, and torchrun waits 30 s before it sends
SIGKILL, so a stopped rank would outlive its job by half a minute; continued, it dies at once.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from experiments.runformat.console import line_start
from experiments.engine.rank.lifetime import mark_orphaned, outlived
from experiments.runformat.run_dir import write_atomic

REPORT_VARIABLE = "SPARSEBENCH_AGENT_REPORT"


def process_state(pid: int) -> str | None:
    """The one-letter state of a process (R, S, T for stopped, Z...), None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]  # the command name in parentheses may hold spaces


def process_rank(pid: int) -> int | None:
    """The global rank a worker process was started as (its RANK variable)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for entry in environ:
        if entry.startswith(b"RANK="):
            return int(entry[5:])
    return None


def continue_closed_ranks(report: dict[str, Any]) -> None:
    """Makes torchrun's closing of a rank also continue it, noting each rank it closed (torchrun
    counts a rank it killed after the first failure among the failures too) and those it found
    stopped."""
    try:
        from torch.distributed.elastic.multiprocessing.subprocess_handler import subprocess_handler
    except ImportError:  # another torch layout: torchrun as it is (a stopped rank waits out its 30 s)
        return
    original = subprocess_handler.SubprocessHandler.close

    def close(self, death_sig: signal.Signals | None = None) -> None:
        pid, state = self.proc.pid, process_state(self.proc.pid)
        # Read from /proc, not self.proc.poll(): poll reaps a rank that ended since torchrun's own
        # check, and torch's close then signals a process group that no longer exists
        # (ProcessLookupError ended the agent). A zombie has ended; it is not counted as closed.
        if state not in (None, "Z"):
            entry = {"rank": process_rank(pid), "pid": pid, "time": time.time()}
            report["closed"].append({**entry, "signal": signal.Signals(death_sig or signal.SIGTERM).name})
            if state == "T":
                report["stopped"].append(entry)
        original(self, death_sig)
        try:
            os.killpg(pid, signal.SIGCONT)  # each rank leads a process group of its own
        except (ProcessLookupError, PermissionError):
            pass

    subprocess_handler.SubprocessHandler.close = close


def failure_record(rank: int, failure: Any) -> dict[str, Any]:
    """What torchrun knows about one failed rank, as plain JSON."""
    exitcode = int(failure.exitcode)
    return {
        "rank": int(rank),
        "local_rank": int(failure.local_rank),
        "pid": int(failure.pid),
        "exitcode": exitcode,
        "signal": signal.Signals(-exitcode).name if exitcode < 0 else None,
        "time": float(failure.timestamp),
    }


def main(argv: list[str]) -> int:
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    parent = os.getppid()
    report: dict[str, Any] = {"pid": os.getpid(), "started": time.time(), "failures": [], "signal": None,
                              "stopped": [], "closed": []}
    continue_closed_ranks(report)
    code = 0
    try:
        torchrun.main(argv)
    except ChildFailedError as error:
        report["failures"] = [failure_record(rank, failure) for rank, failure in error.failures.items()]
        code = 1
    except SignalException as error:
        report["signal"] = signal.Signals(error.sigval).name
        code = 128 + int(error.sigval)
    except Exception as error:  # torchrun's own failure (e.g. a rendezvous that timed out): one line
        report["error"] = f"{type(error).__name__}: {error}".splitlines()[0]
        print(f"{line_start()}torchrun failed: {report['error']}", file=sys.stderr, flush=True)
        code = 1
    finally:
        # The job is over; what is left is bookkeeping. run.py dying thread by thread hands this
        # process from one of its threads to the next, with a death signal (SIGTERM) each time,
        # and torchrun's handler, still installed, would turn the next one into an exception
        # here, losing the report and the run's failed status.
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        report["ended"] = time.time()
        path = os.environ.get(REPORT_VARIABLE)
        if path:
            write_atomic(Path(path), json.dumps(report, indent=2))
        if report["signal"] and outlived(parent):  # run.py's death reaches torchrun as SIGTERM
            mark_orphaned(parent, f"torchrun (pid {os.getpid()}) got {report['signal'] or 'no signal'} and "
                                  f"stopped the ranks")
    return code


def exit_now(code: int) -> None:
    """Ends torchrun without interpreter finalization. Its job is over: the ranks are gone, the
    rendezvous closed (after torchrun's exit barrier) and the report written. Tearing down the
    modules of torch it imported took 0.6 s on an idle machine and about 1 s during a sweep
    (its garbage collection walks every object), and run.py, waiting on this process, printed
    the run's summary only after it."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
