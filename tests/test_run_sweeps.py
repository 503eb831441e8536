"""run_sweeps (experiments/studies/reproduce/sweeps.py): sweeps a few at a time, never two in one
folder, the first failure stopping the others; make endtoend and make compare drive theirs through
it. run_sweep is replaced by a stand-in that records when each sweep ran: no run starts."""
from __future__ import annotations

import threading
import time

import pytest

from experiments.studies.reproduce import sweeps as driver
from experiments.studies.reproduce.studies import Sweep


def test_sweeps_run_two_at_a_time_and_the_first_failure_stops_the_others(monkeypatch, tmp_path):
    """`jobs` sweeps at once, in order; a failed sweep's error is raised after the running ones are
    told to stop (stop_all) and the queued ones are never started."""
    started, stopped, lock = [], threading.Event(), threading.Lock()

    def fake_run_sweep(sweep, out, number, total, cancelled):
        with lock:
            started.append(number)
        if number == 1:
            time.sleep(0.2)  # the second is running by now
            raise SystemExit(f"{sweep.name} failed")
        stopped.wait(5)  # runs until stop_all tells it to end

    monkeypatch.setattr(driver, "run_sweep", fake_run_sweep)
    monkeypatch.setattr(driver, "stop_all", stopped.set)
    sweeps = [Sweep(f"s{i}", f"study/s{i}", (), "") for i in range(1, 5)]
    with pytest.raises(SystemExit, match="s1 failed"):
        driver.run_sweeps(sweeps, tmp_path, jobs=2)
    assert sorted(started) == [1, 2] and stopped.is_set()


def test_two_sweeps_never_share_a_folder_at_once_and_each_finished_one_is_reported(monkeypatch, tmp_path):
    """Sweeps 1 and 2 write into one folder (make compare's statistics/), 3 into another: 2 waits
    for 1 while 3 runs beside it; `finished` hears of every sweep, with its seconds."""
    spans, lock = {}, threading.Lock()

    def fake_run_sweep(sweep, out, number, total, cancelled):
        begun = time.monotonic()
        time.sleep(0.15)
        with lock:
            spans[sweep.name] = (begun, time.monotonic())

    heard = []
    monkeypatch.setattr(driver, "run_sweep", fake_run_sweep)
    sweeps = [Sweep("a", "statistics", (), ""), Sweep("b", "statistics", (), ""), Sweep("c", "convergence", (), "")]
    driver.run_sweeps(sweeps, tmp_path, jobs=2, finished=lambda sweep, seconds: heard.append((sweep.name, seconds)))
    assert spans["b"][0] >= spans["a"][1]  # b started after a ended
    assert spans["c"][0] < spans["a"][1]  # c ran beside a
    assert sorted(name for name, _ in heard) == ["a", "b", "c"] and all(seconds >= 0.15 for _, seconds in heard)


def test_with_failed_given_a_sweep_whose_runs_failed_is_told_and_the_others_go_on(monkeypatch, tmp_path):
    """make compare's battery: a sweep's failed runs (a method that diverges) are its method's
    result; the failure is told to `failed` with run_sweep's reason, the other sweeps still run,
    and nothing is stopped."""
    ran, told, stopped = [], [], threading.Event()

    def fake_run_sweep(sweep, out, number, total, cancelled):
        ran.append(sweep.name)
        if sweep.name == "randomk":
            raise SystemExit("statistics, randomk failed (exit 1): its log is statistics/run.log")

    monkeypatch.setattr(driver, "run_sweep", fake_run_sweep)
    monkeypatch.setattr(driver, "stop_all", stopped.set)
    sweeps = [Sweep(name, "statistics", (), "") for name in ("randomk", "topk", "deft")]
    driver.run_sweeps(sweeps, tmp_path, jobs=2, failed=lambda sweep, seconds, why: told.append((sweep.name, why)))
    assert ran == ["randomk", "topk", "deft"] and not stopped.is_set()
    assert told == [("randomk", "statistics, randomk failed (exit 1): its log is statistics/run.log")]


def test_jobs_compose_from_two_threads_at_once():
    """Two sweeps at a time each compose their jobs (sweeps.started, when their folder holds runs):
    Hydra's one GlobalHydra per process must not see two compositions at once."""
    from concurrent.futures import ThreadPoolExecutor

    from experiments.engine.launcher.compose import compose_job

    overrides = [[f"sparsifier={name}", "dataset=digits"] for name in ("topk", "deft", "micro", "dense")] * 3
    with ThreadPoolExecutor(max_workers=4) as pool:
        names = list(pool.map(lambda args: compose_job(args).sparsifier.name, overrides))
    assert names == ["topk", "deft", "micro", "dense"] * 3
