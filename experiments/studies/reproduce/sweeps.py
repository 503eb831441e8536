"""Running a study's sweeps: one `python run.py -m ...` after another (or a few at a time, each
from its own thread, never two in one folder: run_sweeps, for make endtoend and make compare), a
progress line per finished run, prefixed with the
sweep's number, every run's own output in the sweep folder's run.log (make reproduce and make
endtoend both drive their studies through here).

Resume: a sweep whose folder already holds runs (a study stopped, then started again with the same
`--out`) runs only its unfinished jobs. Its jobs are listed in the order Hydra's basic sweeper runs
them (planned_jobs); a job whose run directory's env.json records the same overrides and whose
status.json says done is reused; a job stopped part-way has its run directory removed and runs again,
alone, under the directory name it had in the whole sweep (hydra.sweep.subdir set to that name), so
a resumed folder looks as if the sweep had run once."""
from __future__ import annotations

import datetime
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from experiments.runformat.caches import keep_caches_out_of_home
from experiments.runformat.run_dir import ENV, STATUS, try_read_json
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


def sweep_jobs(sweep: Sweep, folder: Path) -> list[list[str]]:
    """Every job of `python run.py -m <sweep.args> hydra.sweep.dir=<folder>` in the order Hydra's basic
    sweeper runs it (its experiment's hydra.sweeper.params first, then the command line, a key set
    twice keeping its first place): each job's overrides, hydra.* ones included. Composes once."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from experiments.engine.launcher.compose import compose_job, job_overrides

    args = [*sweep.args, f"hydra.sweep.dir={folder}"]
    first = compose_job(job_overrides([*args, "-m"])[0])
    params = [f"{key}={value}" for key, value in (first.hydra.sweeper.get("params") or {}).items()]
    (batches,) = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides([*params, *args]), None)
    return batches


def planned_jobs(sweep: Sweep, folder: Path) -> list[tuple[list[str], str]]:
    """sweep_jobs, each with the name of the run directory Hydra gives it (hydra.sweep.subdir for
    its job number). Composes every job (0.3-1 s each)."""
    from experiments.engine.launcher.compose import compose_job
    from experiments.engine.launcher.environment_checks import job_run_dir

    return [(job, job_run_dir(compose_job(job), True, num).name) for num, job in enumerate(sweep_jobs(sweep, folder))]


def task_overrides(job: list[str]) -> list[str]:
    """A job's overrides as its env.json records them (job.overrides): hydra.* left out."""
    return [override for override in job if not override.lstrip("+~").startswith("hydra.")]


def is_done(run_dir: Path) -> bool:
    return (try_read_json(run_dir / STATUS) or {}).get("status") == "done"


def recorded_runs(folder: Path) -> dict[tuple[str, ...], list[Path]]:
    """The run directories in `folder` by the overrides their env.json records."""
    recorded: dict[tuple[str, ...], list[Path]] = {}
    for env in sorted(folder.glob(f"*/{ENV}")):
        overrides = ((try_read_json(env) or {}).get("job") or {}).get("overrides")
        if overrides is not None:
            recorded.setdefault(tuple(overrides), []).append(env.parent)
    return recorded


def unfinished_jobs(sweep: Sweep, folder: Path) -> tuple[int, list[tuple[list[str], str]]]:
    """How many of the sweep's jobs `folder` already holds finished, and the others (overrides, run
    directory name). A finished job's run directory: the planned name (or any other in the folder)
    whose env.json records the job's overrides and whose status.json says done."""
    recorded = recorded_runs(folder)
    jobs = planned_jobs(sweep, folder)
    todo = [(job, name) for job, name in jobs
            if not any(is_done(run) for run in recorded.get(tuple(task_overrides(job)), []))]
    return len(jobs) - len(todo), todo


def started(sweep: Sweep, folder: Path) -> bool:
    """Whether `folder` holds a run (finished or not) of one of the sweep's jobs: a sweep never
    started there runs whole, in one process, even in a folder other sweeps share."""
    if not any(folder.glob(f"*/{STATUS}")):
        return False
    recorded = recorded_runs(folder)
    return any(tuple(task_overrides(job)) in recorded for job in sweep_jobs(sweep, folder))


def run_sweep(sweep: Sweep, out: Path, number: int, total: int, cancelled: threading.Event | None = None) -> None:
    """One `python run.py -m` into `<out>/<sweep.folder>`, a progress line per finished run; in a
    folder that already holds some of the sweep's runs, only its unfinished jobs, one `run.py -m`
    each (module docstring: resume). `cancelled` (set before stop_all by a driver running several): a sweep
    whose process starts after stop_all looked stops it itself."""
    folder = out / sweep.folder
    folder.mkdir(parents=True, exist_ok=True)
    print(f"[{number}/{total}] {sweep.name} ({sweep.serves}): python run.py -m {' '.join(sweep.args)}", flush=True)
    progress = _Progress(number, total)
    if not started(sweep, folder):
        _launch(sweep, [*sweep.args, f"hydra.sweep.dir={folder}"], folder, progress, cancelled)
        return
    done, todo = unfinished_jobs(sweep, folder)
    print(f"    [{number}/{total}] resuming: {done} of {done + len(todo)} runs already done (reused), "
          f"{len(todo)} to run", flush=True)
    progress.jobs = str(done + len(todo))
    progress.done = done
    for job, name in todo:
        stopped = folder / name
        if stopped.exists():  # stopped part-way (or failed): run again from the start
            recorded = ((try_read_json(stopped / ENV) or {}).get("job") or {}).get("overrides")
            if recorded is not None and recorded != task_overrides(job):
                raise SystemExit(f"{sweep.name}: {stopped} holds a run of another command line "
                                 f"({' '.join(recorded)}): resume needs the --out of the same study")
            print(f"    [{number}/{total}] {name}: unfinished, removed and run again", flush=True)
            shutil.rmtree(stopped)
        args = [arg for arg in job if not arg.startswith("hydra.sweep.subdir=")]
        _launch(sweep, [*args, f"hydra.sweep.subdir={name}"], folder, progress, cancelled, count_jobs=False)


class _Progress:
    """The runs a sweep has finished, for its progress lines."""

    def __init__(self, number: int, total: int) -> None:
        self.number, self.total, self.jobs, self.done = number, total, "?", 0
        self.started = time.monotonic()


def _launch(sweep: Sweep, args: list[str], folder: Path, progress: _Progress, cancelled: threading.Event | None,
            count_jobs: bool = True) -> None:
    """`python run.py -m ARGS`, its output into folder/run.log, a progress line per finished run."""
    command = [sys.executable, str(REPO_ROOT / "run.py"), "-m", *args]
    number, total = progress.number, progress.total
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
                if launching and count_jobs:
                    progress.jobs = launching.group(1)
                elif summary:
                    progress.done += 1
                    print(f"    [{number}/{total}] run {progress.done}/{progress.jobs} done: {summary.group(1)} "
                          f"({minutes(time.monotonic() - progress.started)})", flush=True)
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


def threads_override(jobs: int) -> str:
    """The threads each hosted run takes when `jobs` sweeps share the cores: left to itself a
    hosted run takes them all (launcher.threads_per_process: cores / processes), and two such
    runs side by side spin against each other (OpenMP's waiting threads)."""
    return f"launcher.threads_per_process={max(1, (os.cpu_count() or 1) // jobs)}"


def run_sweeps(sweeps: list[Sweep], out: Path, jobs: int,
               finished: Callable[[Sweep, float], None] | None = None,
               failed: Callable[[Sweep, float, str], None] | None = None) -> None:
    """Every sweep, `jobs` at a time, each from its own thread: in the given order, except that a
    sweep waits while another runs in its folder (the sweep's report reads its whole folder when
    it ends, and a resumed sweep lists what the folder holds), the next one whose folder is free
    starting instead. `finished(sweep, seconds)` after each that ends well, from its thread. The
    first failure stops the others (their runs end as run.py ends a stopped job), none queued
    starts, and it is raised; unless `failed` is given: then a sweep whose run.py ended with failed
    runs (a run that diverged is a result of its method, make compare's battery) is told to it,
    `failed(sweep, seconds, why)`, and the others go on. Stopping the driver (Ctrl-C, SIGTERM)
    always stops every sweep, and the sweeps it stopped are not told as failed."""
    cancelled, free = threading.Event(), threading.Condition()
    queued, busy = list(enumerate(sweeps, 1)), set()

    def take() -> tuple[int, Sweep] | None:
        with free:
            while queued and not cancelled.is_set():
                ready = next((i for i, (_, sweep) in enumerate(queued) if sweep.folder not in busy), None)
                if ready is not None:
                    number, sweep = queued.pop(ready)
                    busy.add(sweep.folder)
                    return number, sweep
                free.wait()
            return None

    def cancel() -> None:
        cancelled.set()  # before stop_all: a sweep starting now stops itself (run_sweep)
        stop_all()
        with free:
            free.notify_all()

    def worker() -> None:
        while (taken := take()) is not None:
            number, sweep = taken
            started = time.monotonic()
            try:
                run_sweep(sweep, out, number, len(sweeps), cancelled)
            except SystemExit as error:
                if failed is None or cancelled.is_set():
                    cancel()
                    raise
                failed(sweep, time.monotonic() - started, str(error))
                continue
            except BaseException:
                cancel()
                raise
            finally:
                with free:
                    busy.discard(sweep.folder)
                    free.notify_all()
            if finished is not None:
                finished(sweep, time.monotonic() - started)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        workers = [pool.submit(worker) for _ in range(max(1, min(jobs, len(sweeps))))]
        try:
            for one in workers:
                one.result()
        except BaseException:  # a sweep failed, Ctrl-C, SIGTERM: the running ones stop, the queued never start
            cancel()
            raise


def stop_all() -> None:
    """SIGTERM to every sweep still running (another sweep's thread failed, or the driver was
    stopped): each run.py stops its job and its sweep; their threads then see them end."""
    with _RUNNING_LOCK:
        running = list(RUNNING)
    for process in running:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
