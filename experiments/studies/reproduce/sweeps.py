"""Running a study's sweeps: one `python run.py -m ...` after another (or a few at a time, each
from its own thread: make endtoend --jobs), a progress line per finished run, prefixed with the
sweep's number, every run's own output in the sweep folder's run.log (make reproduce and make
endtoend both drive their studies through here)."""
from __future__ import annotations

import datetime
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from experiments.runformat.caches import keep_caches_out_of_home
from experiments.engine.launcher.environment import REPO_ROOT
from experiments.studies.reproduce.studies import Sweep

LAUNCHING = re.compile(r"Launching (\d+) jobs")
SUMMARY = re.compile(r"^summary \((.*)\)\s*$")
RUNNING: set[subprocess.Popen] = set()  # every sweep's `run.py -m` now running, for stop_all
_RUNNING_LOCK = threading.Lock()


def start_study(given: Path | None, kind: str) -> Path:
    """What a study's driver does first: caches out of $HOME, SIGTERM ends it through run_sweep's
    clean-up, W&B never online (there may be no network). Returns its output folder: `given`, or
    outputs/<kind>/<time>."""
    keep_caches_out_of_home()
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    os.environ.setdefault("WANDB_MODE", "offline")
    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    return (given or REPO_ROOT / "outputs" / kind / stamp).resolve()


def say_if_busy(timed: str) -> None:
    """Prints busy_warning's line, if the machine is busy."""
    warning = busy_warning(timed)
    if warning:
        print(warning, flush=True)


def busy_warning(timed: str) -> str | None:
    """A line when other work already keeps the cores busy: what times this machine (`timed`,
    e.g. "the selection-cost claims time it") carries that load into its numbers."""
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load < cores:  # as much other work as there are cores (the bootstrap's pip install stays below)
        return None
    return f"note: the machine is busy (load average {load:.1f} on {cores} cores): {timed}, so its numbers will carry that load"


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


def run_sweep(sweep: Sweep, out: Path, number: int, total: int, cancelled: threading.Event | None = None) -> None:
    """One `python run.py -m` into `<out>/<sweep.folder>`, a progress line per finished run.
    `cancelled` (set before stop_all by a driver running several): a sweep whose process starts
    after stop_all looked stops it itself."""
    folder = out / sweep.folder
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(REPO_ROOT / "run.py"), "-m", *sweep.args, f"hydra.sweep.dir={folder}"]
    print(f"[{number}/{total}] {sweep.name} ({sweep.serves}): python run.py -m {' '.join(sweep.args)}", flush=True)
    started, jobs, done = time.monotonic(), "?", 0
    with open(folder / "run.log", "a") as log:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert process.stdout is not None
        with _RUNNING_LOCK:
            RUNNING.add(process)
        if cancelled is not None and cancelled.is_set():
            process.send_signal(signal.SIGTERM)
        try:
            for line in process.stdout:
                log.write(line)
                log.flush()
                launching, summary = LAUNCHING.search(line), SUMMARY.match(line.strip())
                if launching:
                    jobs = launching.group(1)
                elif summary:
                    done += 1
                    print(f"    [{number}/{total}] run {done}/{jobs} done: {summary.group(1)} "
                          f"({minutes(time.monotonic() - started)})", flush=True)
        finally:
            if process.poll() is None:  # stopped ourselves (Ctrl-C, SIGTERM): run.py stops its job and the sweep
                process.send_signal(signal.SIGTERM)
                for line in process.stdout:  # run.py reports the stopped run through this pipe: keep reading
                    log.write(line)
        code = process.wait()
        with _RUNNING_LOCK:
            RUNNING.discard(process)
    if code != 0:
        tail = (folder / "run.log").read_text().splitlines()[-15:]
        print("\n".join(tail), file=sys.stderr)
        raise SystemExit(f"{sweep.name} failed (exit {code}): its log is {folder / 'run.log'}")


def stop_all() -> None:
    """SIGTERM to every sweep still running (another sweep's thread failed, or the driver was
    stopped): each run.py stops its job and its sweep; their threads then see them end."""
    with _RUNNING_LOCK:
        running = list(RUNNING)
    for process in running:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
