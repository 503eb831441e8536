"""The parent side of a run: prepare the run directory, start the ranks, record the outcome.

Ranks are started by torchrun as a subprocess (max_restarts=0, explicit c10d rendezvous), so a
crash in any rank ends the whole job: torchrun stops the other ranks, and this process, which
survives them, marks the run failed with the rank's error. A signal to this process stops the
job's whole process group first (lifetime.py). Nothing already written is touched.
"""
from __future__ import annotations

import hashlib
import os
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from experiments.environment import REPO_ROOT, collect_environment, resolve_runtime
from experiments.launcher_checks import rendezvous_error
from experiments.lifetime import Stopped, run_job
from experiments.report import format_summary
from experiments.store import CONFIG, ENV, SUMMARY, RunStore, write_atomic
from sparsifiers.base import ConfigError


def prepare_run_dir(cfg: DictConfig, run_dir: Path, job: dict[str, Any]) -> tuple[RunStore, dict[str, Any]]:
    """Writes config.yaml and env.json, and marks the run as running."""
    store = RunStore(run_dir)
    if store.status() is not None:
        raise ConfigError(f"{run_dir} already holds a run (status.json exists): choose another hydra.run.dir")
    run_dir.mkdir(parents=True, exist_ok=True)
    resolved = resolve_runtime(cfg)
    write_atomic(store.path(CONFIG), OmegaConf.to_yaml(cfg, resolve=True))
    job = {**job, "wandb_id": uuid.uuid4().hex[:12]}  # kept by every resume of this run
    environment = collect_environment(resolved, job)
    store.write_json(ENV, environment)
    store.set_status("running", started=time.time(), pid=os.getpid(), host=socket.gethostname())
    return store, environment


def rank_command(cfg: DictConfig, resolved: dict[str, Any], run_dir: Path) -> list[str]:
    """One process hosting every rank runs the worker directly, without torch.distributed;
    otherwise `python -m torch.distributed.run ... -m experiments.worker RUN_DIR`."""
    launcher = cfg.launcher
    if resolved["processes"] == 1 and launcher.nnodes == 1:
        return [sys.executable, "-m", "experiments.worker", str(run_dir)]
    rdzv_id = launcher.rdzv_id or hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:12]
    return [
        sys.executable, "-m", "torch.distributed.run",
        f"--nnodes={launcher.nnodes}",
        f"--nproc-per-node={resolved['processes_per_node']}",
        f"--max-restarts={launcher.max_restarts}",
        f"--rdzv-backend={launcher.rdzv_backend}",
        f"--rdzv-endpoint={launcher.rdzv_endpoint}",
        f"--rdzv-id={rdzv_id}",
        f"--rdzv-conf=join_timeout={launcher.rdzv_timeout_s}",  # a node that never joins fails the run
        "-m", "experiments.worker", str(run_dir),
    ]


def rank_environment(resolved: dict[str, Any], run_dir: Path) -> dict[str, str]:
    """The ranks' environment: thread counts, import path, caches inside the run directory."""
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(resolved["threads_per_process"])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("MPLCONFIGDIR", str(run_dir / ".cache" / "matplotlib"))
    env.setdefault("WANDB_DIR", str(run_dir))
    env.setdefault("WANDB_CACHE_DIR", str(run_dir / "wandb" / "cache"))
    env.setdefault("WANDB_CONFIG_DIR", str(run_dir / "wandb" / "config"))
    env.setdefault("WANDB_DATA_DIR", str(run_dir / "wandb" / "data"))
    env.setdefault("WANDB_SILENT", "true")
    return env


def rank_errors(run_dir: Path) -> str | None:
    """The last line of each failed rank's traceback, rank by rank."""
    messages = []
    for path in sorted(run_dir.glob("error.rank*.txt")):
        lines = [line for line in path.read_text().strip().splitlines() if line.strip()]
        if lines:
            messages.append(f"{path.stem.removeprefix('error.')}: {lines[-1]}")
    return "; ".join(messages) or None


def launch(cfg: DictConfig, run_dir: Path, job: dict[str, Any]) -> dict[str, Any]:
    """Runs one job to completion; returns its summary (with `status`)."""
    store, environment = prepare_run_dir(cfg, run_dir, job)
    return run_to_end(cfg, store, environment["resolved"])


def run_to_end(cfg: DictConfig, store: RunStore, resolved: dict[str, Any]) -> dict[str, Any]:
    """Starts the ranks of a prepared (or resumed) run directory and records how they ended."""
    run_dir = store.dir
    started = time.time()
    returncode, stopped_by = run_job(rank_command(cfg, resolved, run_dir), rank_environment(resolved, run_dir),
                                     str(REPO_ROOT))
    if stopped_by is not None:
        stop = Stopped(stopped_by)
        store.set_status("failed", ended=time.time(), returncode=returncode, error=str(stop), signal=stopped_by.name)
        print(f"run stopped: {stop}\n  details: {run_dir}/status.json", file=sys.stderr, flush=True)
        raise stop
    summary = store.read_json(SUMMARY)
    if returncode == 0 and summary is not None:
        store.set_status("done", ended=time.time(), elapsed_s=time.time() - started)
        print(format_summary(summary, str(run_dir)), flush=True)
        return {"status": "done", **summary}
    error = rank_errors(run_dir) or rendezvous_error(cfg, time.time() - started) or f"the ranks exited with code {returncode}"
    store.set_status("failed", ended=time.time(), returncode=returncode, error=error)
    print(f"run failed: {error}\n  details: {run_dir}/status.json and error.rank*.txt", file=sys.stderr, flush=True)
    return {"status": "failed", "error": error}
