"""Why a run failed: the first failure is the cause, every later one a consequence.

When one rank dies, its peers fail too, a moment later, with their own errors ("Connection
reset by peer", "Connection closed by peer", a collective that timed out), and a rank killed by
a signal writes nothing at all. Reporting whatever errors were written would blame the
survivors. Three sources, each knowing part of the story:

    error.rank<r>.txt   written by a rank that raised (worker.py): its traceback; the file's
                        modification time is when the rank failed (ns resolution)
    the agent report    written by torchrun (agent.py): each rank torchrun saw exit non-zero,
                        with its pid and exit code, so also the signal that killed a rank
                        (exit code -9: SIGKILL); a signal torchrun got; ranks found stopped
    the return code     of torchrun (or the single worker) as run.py saw it: negative when it
                        was killed by a signal, which it cannot report itself

The order, most telling first:
1. torchrun (or the single worker process) killed by, or stopped on, a signal: every rank
   failure after it is its doing (its ranks die with it).
2. a rank's own failure: killed by a signal, or an error that is not a lost peer; the earliest.
3. a rank found stopped when the job was torn down: its peers' collectives timed out on it.
4. a lost peer or a timeout, the earliest, when nothing above explains it.
Ranks that torchrun itself stopped after the first failure (it lists them among the failures,
exit code -15) are never a cause: the agent notes each rank it closes.
Everything else is a consequence, in time order.
"""
from __future__ import annotations

import re
import signal
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from experiments.runformat.run_dir import ERROR_FILES, error_file_process

# An error of this form says a peer went away or never answered: a consequence, not a cause.
PEER_LOST = re.compile(
    r"connection (reset|closed) by peer|broken pipe|connection refused|timed out|timeout|"
    r"DistNetworkError|ECONNRESET|EPIPE|gloo/transport", re.IGNORECASE)


@dataclass
class Failure:
    """One process's end, as one line of text and its parts."""

    text: str
    process: str  # "rank 2", "torchrun", "worker"
    kind: str  # "signal" | "error" | "stopped" | "peer" | "teardown" (torchrun stopped it)
    rank: int | None = None
    pid: int | None = None
    signal: str | None = None
    exitcode: int | None = None
    error: str | None = None
    time: float | None = None


def last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(empty error file)"


def process_name(rank: int, per_process: int = 1) -> str:
    """torchrun's rank r is a process; in a hosted run (W/P ranks each) it hosts several ranks."""
    if per_process == 1:
        return f"rank {rank}"
    return f"process {rank} (ranks {rank * per_process}-{(rank + 1) * per_process - 1})"


def rank_failures(run_dir: Path, report: dict[str, Any] | None, per_process: int = 1) -> list[Failure]:
    """Every rank's failure, from its own error file and from what torchrun saw."""
    seen = {entry["rank"]: entry for entry in (report or {}).get("failures", [])}
    failures = []
    for path in run_dir.glob(ERROR_FILES):
        rank = error_file_process(path.name)
        if rank is None:  # error.rankX.txt: no process's file
            continue
        line, name = last_line(path), process_name(rank, per_process)
        agent = seen.pop(rank, {})
        failures.append(Failure(
            text=f"{name}: {line}", process=name, rank=rank,
            kind="peer" if PEER_LOST.search(line) else "error", pid=agent.get("pid"),
            exitcode=agent.get("exitcode"), error=line, time=path.stat().st_mtime))
    closed = {(entry["pid"], entry["signal"]): entry for entry in (report or {}).get("closed", [])}
    for rank, agent in seen.items():  # failed without writing an error file
        pid, code, name = agent["pid"], agent["exitcode"], process_name(rank, per_process)
        teardown = closed.get((pid, agent.get("signal")))
        if teardown is not None:
            failures.append(Failure(text=f"{name} (pid {pid}) stopped by torchrun ({agent['signal']}) as the "
                                         f"job failed", process=name, kind="teardown", rank=rank, pid=pid,
                                    signal=agent["signal"], exitcode=code, time=teardown["time"]))
            continue
        if agent.get("signal"):
            text, kind = f"{name} (pid {pid}) killed by {agent['signal']}", "signal"
        else:
            text, kind = f"{name} (pid {pid}) exited with code {code} and wrote no error", "error"
        failures.append(Failure(text=text, process=name, kind=kind, rank=rank, pid=pid,
                                signal=agent.get("signal"), exitcode=code, time=agent.get("time")))
    return failures


def launcher_failure(returncode: int, pid: int, torchrun: bool, report: dict[str, Any] | None,
                     ended: float) -> Failure | None:
    """torchrun (or the single worker) killed by a signal, or torchrun told of one."""
    name = "torchrun" if torchrun else "worker"
    label = f"torchrun (pid {pid})" if torchrun else f"the worker process (pid {pid}, hosting every rank)"
    if report and report.get("signal"):
        sig = report["signal"]
        return Failure(text=f"{label} got {sig}", process=name, kind="signal", pid=pid,
                       signal=sig, exitcode=returncode, time=report.get("ended"))
    if returncode < 0:
        sig = signal.Signals(-returncode).name
        return Failure(text=f"{label} killed by {sig}", process=name, kind="signal", pid=pid,
                       signal=sig, exitcode=returncode, time=ended)
    if report and report.get("error"):
        return Failure(text=f"{label} failed: {report['error']}", process=name, kind="error", pid=pid,
                       exitcode=returncode, error=report["error"], time=report.get("ended"))
    return None


def merge_reports(own: dict[str, Any] | None, others: list[dict[str, Any]]) -> dict[str, Any] | None:
    """This node's agent report with the rank-level findings of the other nodes' (a shared run
    directory): a rank killed on node 1 is the cause on node 0 too, where its ranks only saw the
    peer go. Signals to and errors of another node's torchrun stay that node's."""
    if own is None or not others:
        return own
    merged = dict(own)
    for key in ("failures", "closed", "stopped"):
        merged[key] = [*own.get(key, []), *(entry for other in others for entry in other.get(key, []))]
    return merged


def stopped_ranks(report: dict[str, Any] | None, timeout_s: float, per_process: int = 1) -> list[Failure]:
    """The ranks found stopped at teardown: their peers timed out waiting for them."""
    stopped = []
    for entry in (report or {}).get("stopped", []):
        name = process_name(entry["rank"], per_process)
        stopped.append(Failure(text=f"{name} (pid {entry['pid']}) was stopped (SIGSTOP or SIGTSTP): its peers' "
                                    f"collectives timed out after launcher.timeout_s={timeout_s:g} s",
                               process=name, kind="stopped", rank=entry["rank"], pid=entry["pid"], signal="SIGSTOP",
                               time=entry["time"]))
    return stopped


def _earliest(failures: list[Failure]) -> Failure:
    return min(failures, key=lambda failure: (failure.time is None, failure.time or 0.0))


def explain(run_dir: Path, returncode: int, pid: int, torchrun: bool, report: dict[str, Any] | None,
            ended: float, timeout_s: float, per_process: int = 1) -> dict[str, Any]:
    """The `error` line, `cause` and `consequences` for status.json (`per_process`: ranks each
    process hosts, W/P)."""
    launcher = launcher_failure(returncode, pid, torchrun, report, ended)
    ranks = rank_failures(run_dir, report, per_process)
    stopped = stopped_ranks(report, timeout_s, per_process)
    own = [failure for failure in ranks if failure.kind in ("signal", "error")]
    if launcher is not None:
        cause = launcher
    elif own:
        cause = _earliest(own)
    elif stopped:
        cause = _earliest(stopped)
    elif [failure for failure in ranks if failure.kind == "peer"]:
        cause = _earliest([failure for failure in ranks if failure.kind == "peer"])
    else:
        cause = Failure(text=f"the ranks exited with code {returncode} and reported nothing", process=
                        "torchrun" if torchrun else "worker", kind="error", pid=pid, exitcode=returncode)
    rest = sorted((failure for failure in [*stopped, *ranks] if failure is not cause),
                  key=lambda failure: (failure.time is None, failure.time or 0.0))
    return {"error": cause.text, "cause": asdict(cause), "consequences": [asdict(failure) for failure in rest]}
