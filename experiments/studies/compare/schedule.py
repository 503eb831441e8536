"""Running the battery's parts, and the ledger of what ran (docs/compare.md, "What it costs").

The order. First every untimed sweep (statistics, the per-step runs, convergence; their numbers
are counts and accuracies, which sharing the cores does not change) `jobs` at a time, never two in
one folder (run_sweeps); then each selection replay alone, as it times the selection: a sweep
beside it would load the cores it is timed on. On this project's 2-core machine the statistics and
convergence runs take one thread each, so two at a time nearly halve their wall time; each hosted
ResNet-18 run of the per-step part is given the cores' share (sweeps.threads_override), since two runs
that each take every core spin against each other (make endtoend's finding: 2-3 s a step, not 0.2).

A sweep whose runs fail (Random-k's statistics runs diverge at the laptop workload's learning rate)
does not stop the battery: the failure is its method's result, its runs stay in the folder with
their reasons, which the verdicts name, and the other sweeps go on. Stopping the command stops
every sweep.

The ledger. `<out>/parts.json` holds each part that ended, by its command line (the sweep's
folder and arguments, the replay's folder and options), with its seconds and, for a sweep whose
runs failed, why; and the wall time of every session that ran parts. A later call skips a part the ledger holds without composing its
jobs again, the estimate of a stopped study prices only the parts it lacks (baseline.py), and the
leaderboard's header gives the sessions' wall time in all. Delete the study folder to run it again.
"""
from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from experiments.runformat.run_dir import try_read_json, write_atomic
from experiments.studies.compare.battery import Plan, Replay
from experiments.studies.reproduce.studies import Sweep
from experiments.studies.reproduce.sweeps import run_sweeps

PARTS = "parts.json"


def sweep_key(sweep: Sweep) -> str:
    return f"{sweep.folder}: {' '.join(sweep.args)}"


def replay_key(replay: Replay, out: Path, overrides: tuple[str, ...]) -> str:
    options = json.dumps({**replay.options, "overrides": overrides}, sort_keys=True, default=list)
    return f"{replay.folder.relative_to(out)}: {options}"


class Ledger:
    """The parts of a study folder that ended well, and the wall time of the sessions that ran them."""

    def __init__(self, out: Path) -> None:
        self.path = out / PARTS
        saved = try_read_json(self.path) or {}
        self.parts: dict[str, dict] = saved.get("parts", {})
        self.wall_s: float = float(saved.get("wall_s", 0.0))
        self._lock = threading.Lock()  # sweeps end in their own threads

    def holds(self, key: str) -> bool:
        return key in self.parts

    def record(self, key: str, part: str, method: str, seconds: float, failed: str | None = None) -> None:
        """A part that ended: well, or with failed runs (`failed`: why; its runs stay in the folder,
        the verdicts name them, and a later call does not run them again). Paths in `failed` are
        kept relative to the study folder, which may be copied elsewhere (a baseline put in place)."""
        if failed:
            failed = failed.replace(f"{self.path.parent}{os.sep}", "")
        with self._lock:
            self.parts[key] = {"part": part, "method": method, "seconds": round(seconds, 1),
                               **({"failed": failed} if failed else {})}
            self._write()

    def failures(self) -> list[str]:
        return [f"{entry['part']}, {entry['method']}: {entry['failed']}" for entry in self.parts.values() if "failed" in entry]

    def add_wall(self, seconds: float) -> None:
        with self._lock:
            self.wall_s += seconds
            self._write()

    def _write(self) -> None:
        write_atomic(self.path, json.dumps({"wall_s": round(self.wall_s, 1), "parts": self.parts}, indent=1) + "\n")


def pending_sweeps(plans: list[Plan], baselines: list[tuple[str, Sweep]], ledger: Ledger) -> list[tuple[str, str, Sweep]]:
    """(part, method, sweep) for every untimed sweep the ledger does not hold, each once, in the
    plans' order with the baselines' after the first per-step sweep."""
    found: dict[str, tuple[str, str, Sweep]] = {}
    for plan in plans:
        for part, sweep in plan.sweeps:
            found.setdefault(sweep_key(sweep), (part, plan.method, sweep))
            if part == "per-step":
                for base_part, base in baselines:
                    found.setdefault(sweep_key(base), (base_part, "dense baselines", base))
    return [entry for key, entry in found.items() if not ledger.holds(key)]


def run_battery(plans: list[Plan], baselines: list[tuple[str, Sweep]], out: Path, overrides: tuple[str, ...], jobs: int,
                ledger: Ledger, say: Callable[[str], None] = print) -> None:
    """Every part not yet done (module docstring: the order); each recorded in the ledger as it ends."""
    held = sum(ledger.holds(sweep_key(sweep)) for plan in plans for _, sweep in plan.sweeps)
    if held:
        say(f"    {held} sweeps already done here (the ledger, {ledger.path.name}): reused")
    todo = pending_sweeps(plans, baselines, ledger)
    part_of = {sweep_key(sweep): (part, method) for part, method, sweep in todo}
    run_sweeps([sweep for _, _, sweep in todo], out, jobs,
               finished=lambda sweep, seconds: ledger.record(sweep_key(sweep), *part_of[sweep_key(sweep)], seconds),
               failed=lambda sweep, seconds, why: ledger.record(sweep_key(sweep), *part_of[sweep_key(sweep)], seconds, why))
    for plan in plans:
        replay = plan.replay
        if replay is None:
            continue
        if replay.done():
            say(f"    selection, {plan.method}: already done, reused")
            continue
        started = time.monotonic()
        replay.run(overrides, say)
        ledger.record(replay_key(replay, out, overrides), replay.part, plan.method, time.monotonic() - started)
    for line in ledger.failures():
        say(f"failed, kept as its method's result (its runs' reasons in the scorecard): {line}")
