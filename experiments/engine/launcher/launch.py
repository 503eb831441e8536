"""The parent side of a run: prepare the run directory, start the ranks, record the outcome.

Ranks are started by torchrun as a subprocess (max_restarts=0, explicit c10d rendezvous), so a
crash in any rank ends the whole job: torchrun stops the other ranks, and this process, which
survives them, marks the run failed with the first failure as its cause and the rest as
consequences (blame.py, from the ranks' error files and torchrun's report, agent.py), and
finishes the W&B record as failed (wandb_failure.py). A signal to this process stops the job's
whole process group first (lifetime.py). Nothing already written is touched. On several nodes
each node's run.py reports its own part, and the one hosting rank 0 the run (nodes.py).
"""
from __future__ import annotations

import os
import socket
import sys
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from experiments.engine.launcher.agent import REPORT_VARIABLE
from experiments.engine.launcher.blame import explain, merge_reports, rank_failures
from experiments.runformat.console import line_start
from experiments.engine.launcher import kernel_cache
from experiments.engine.launcher.environment import REPO_ROOT, collect_environment
from experiments.runformat.errors import ConfigError
from experiments.engine.launcher.launcher_checks import rendezvous_error
from experiments.engine.rank.lifetime import STATUS_VARIABLE, Stopped, run_job
from experiments.engine.rank.nodes import ENV_FILE_VARIABLE, hosts_rank_zero, node_tag, rendezvous_id
from experiments.engine.rank.report import format_summary
from experiments.runformat.run_dir import (AGENT_REPORT, CACHE_DIR, CONFIG, ENV, ERROR_FILES, RANK_ZERO, STATUS, SUMMARY,
                                 WANDB_DIR, node_file, write_atomic)
from experiments.runformat.runtime import Runtime, resolve
from experiments.runformat.store import RunStore
from experiments.engine.rank.wandb_failure import record_failure


def joins_a_running_node(cfg: DictConfig, existing: dict[str, Any]) -> bool:
    """On several nodes sharing a run directory, the first node's status.json is no reason to
    refuse: it is the same run if it is running under the same rendezvous id."""
    return (cfg.launcher.nnodes > 1 and existing.get("status") == "running"
            and existing.get("rdzv_id") == rendezvous_id(cfg))


def joins_another_node(cfg: DictConfig, run_dir: Path, patience_s: float = 2.0) -> bool:
    """Whether the run already in `run_dir` is this node's own multi-node run: running under the
    same rendezvous id (`joins_a_running_node`), or not yet marked at all. Nodes started together
    race: Hydra writes the first node's .hydra/config.yaml a moment before that node marks the
    run running, so an unmarked directory joins when its config is this one's (as Hydra writes
    it: unresolved, no hydra key). A file still being written is read again for up to
    `patience_s`; a status that appears meanwhile decides."""
    written = run_dir / ".hydra" / CONFIG  # Hydra's name for it is the run's own
    if cfg.launcher.nnodes == 1:
        return False
    task = OmegaConf.to_container(OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"]))
    deadline = time.monotonic() + patience_s
    while True:
        status = RunStore(run_dir).status()
        if status is not None:
            return joins_a_running_node(cfg, status)
        try:
            return written.is_file() and OmegaConf.to_container(OmegaConf.load(written)) == task
        except Exception:  # noqa: BLE001 - cut short while Hydra writes it: read it again
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)


def prepare_run_dir(cfg: DictConfig, run_dir: Path, job: dict[str, Any]) -> tuple[RunStore, dict[str, Any]]:
    """Writes config.yaml and env.json (env.<node>.json on several nodes), and marks the run
    (and the node) as running."""
    store = RunStore(run_dir)
    existing = store.status()
    if existing is not None and not joins_a_running_node(cfg, existing):
        raise ConfigError(f"{run_dir} already holds a run (status.json exists): choose another hydra.run.dir")
    run_dir.mkdir(parents=True, exist_ok=True)
    runtime = resolve(cfg)
    write_atomic(store.path(CONFIG), OmegaConf.to_yaml(cfg, resolve=True))
    tag = node_tag(cfg)
    job = {**job, "wandb_id": uuid.uuid4().hex[:12]}  # kept by every resume of this run
    environment = {**collect_environment(runtime, job), "node": tag, "rdzv_id": rendezvous_id(cfg)}
    store.write_json(node_file(ENV, tag), environment)
    for name in status_files(store, tag, owner=existing is None):
        store.set_status("running", name=name, started=time.time(), rdzv_id=environment["rdzv_id"],
                         pid=os.getpid(), host=socket.gethostname())
    return store, environment


def status_files(store: RunStore, tag: str, owner: bool) -> list[str]:
    """status.json, and on several nodes the node's own status.<node>.json before it."""
    if not tag:
        return [STATUS]
    return [node_file(STATUS, tag), STATUS] if owner else [node_file(STATUS, tag)]


def rank_command(cfg: DictConfig, runtime: Runtime, run_dir: Path) -> list[str]:
    """One process hosting every rank runs the worker directly, without torch.distributed (unless
    launcher.max_restarts asks torchrun to restart it); otherwise torchrun: `python -m experiments.engine.launcher.agent ... -m experiments.engine.rank.worker RUN_DIR`."""
    launcher = cfg.launcher
    if runtime.single_process and launcher.nnodes == 1 and launcher.max_restarts == 0:  # restarts need torchrun
        return [sys.executable, "-m", "experiments.engine.rank.worker", str(run_dir)]
    rdzv_id = rendezvous_id(cfg)  # alike on every node (nodes.py)
    return [
        sys.executable, "-m", "experiments.engine.launcher.agent",  # torchrun, and a report of how it ended
        f"--nnodes={launcher.nnodes}",
        f"--nproc-per-node={runtime.processes_per_node}",
        f"--max-restarts={launcher.max_restarts}",
        f"--rdzv-backend={launcher.rdzv_backend}",
        f"--rdzv-endpoint={launcher.rdzv_endpoint}",
        f"--rdzv-id={rdzv_id}",
        f"--rdzv-conf=join_timeout={launcher.rdzv_timeout_s}",  # a node that never joins fails the run
        "-m", "experiments.engine.rank.worker", str(run_dir),
    ]


def rank_environment(runtime: Runtime, run_dir: Path) -> dict[str, str]:
    """The ranks' environment: thread counts, import path, caches inside the run directory."""
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(runtime.threads_per_process)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("MPLCONFIGDIR", str(run_dir / CACHE_DIR / "matplotlib"))
    env.setdefault("WANDB_DIR", str(run_dir))
    env.setdefault("WANDB_CACHE_DIR", str(run_dir / WANDB_DIR / "cache"))
    env.setdefault("WANDB_CONFIG_DIR", str(run_dir / WANDB_DIR / "config"))
    env.setdefault("WANDB_DATA_DIR", str(run_dir / WANDB_DIR / "data"))
    env.setdefault("WANDB_SILENT", "true")
    return env


def node_environment(runtime: Runtime, run_dir: Path, tag: str) -> dict[str, str]:
    """rank_environment, plus the files of this node: the env.json its ranks read, where torchrun
    reports how it ended, and the status file it marks if run.py dies first."""
    env = rank_environment(runtime, run_dir)
    env[ENV_FILE_VARIABLE] = node_file(ENV, tag)
    env[REPORT_VARIABLE] = str(run_dir / node_file(AGENT_REPORT, tag))
    env[STATUS_VARIABLE] = str(run_dir / node_file(STATUS, tag))
    return env


def other_nodes_reports(store: RunStore, tag: str, nnodes: int, wait_s: float = 5.0) -> list[dict[str, Any]]:
    """The other nodes' torchrun reports of this run, in a shared run directory (which holds
    one run only): waits a few seconds for them, as nodes see a failure at different times."""
    mine = node_file(AGENT_REPORT, tag)
    deadline = time.time() + wait_s
    while True:
        reports = [report for path in sorted(store.dir.glob(node_file(AGENT_REPORT, "*"))) if path.name != mine
                   and (report := store.read_json(path.name)) is not None]
        if len(reports) >= nnodes - 1 or time.time() > deadline:
            return reports
        time.sleep(0.2)


def finish_wandb(run_dir: Path, blame: dict[str, Any]) -> None:
    """The failure goes into the W&B run; a W&B problem must not hide the run's own failure."""
    try:
        record_failure(run_dir, blame)
    except Exception as error:  # noqa: BLE001 - reported, and the run's status already says it all
        print(f"{line_start()}note: could not record the failure in W&B: {type(error).__name__}: {error}", file=sys.stderr)


def launch(cfg: DictConfig, run_dir: Path, job: dict[str, Any]) -> dict[str, Any]:
    """Runs one job (this node's part of it) to completion; returns its summary (with `status`)."""
    existed = RunStore(run_dir).status() is not None
    store, environment = prepare_run_dir(cfg, run_dir, job)
    return run_to_end(cfg, store, environment, existed)


def run_to_end(cfg: DictConfig, store: RunStore, environment: dict[str, Any], existed: bool) -> dict[str, Any]:
    """Starts the ranks of a prepared (or resumed) run directory and records how they ended."""
    run_dir = store.dir
    runtime, tag = Runtime.from_dict(environment["resolved"], cfg.logger.wandb_mode), environment["node"]
    per_process = runtime.ranks_per_process  # ranks each process hosts (for blame's names)
    kernel_cache.prepare(cfg.kernels, runtime.device)  # compiled once here, not by every rank (first run only)
    started = time.time()
    command = rank_command(cfg, runtime, run_dir)
    returncode, stopped_by, pid = run_job(command, node_environment(runtime, run_dir, tag), str(REPO_ROOT))
    ended = time.time()
    report = store.read_json(node_file(AGENT_REPORT, tag))
    if tag and returncode != 0:
        report = merge_reports(report, other_nodes_reports(store, tag, cfg.launcher.nnodes))
    # The run's own status.json is this node's to write unless another node hosted rank 0 here.
    owner = not tag or hosts_rank_zero(run_dir, pid) or not (existed or store.path(RANK_ZERO).exists())
    statuses = status_files(store, tag, owner)
    if stopped_by is not None:
        stop = Stopped(stopped_by)
        cause = {"text": str(stop), "process": "run.py", "kind": "signal", "pid": os.getpid(),
                 "signal": stopped_by.name}
        consequences = [asdict(failure) for failure in rank_failures(run_dir, report, per_process)]
        for name in statuses:
            store.set_status("failed", name=name, ended=ended, returncode=returncode, error=str(stop),
                             signal=stopped_by.name, cause=cause, consequences=consequences)
        if owner:
            finish_wandb(run_dir, {"error": str(stop), "cause": cause})
        # From column 0 of a clean line: a rank killed mid-step leaves its progress bar drawn.
        print(f"{line_start(cfg.logger.progress)}run stopped: {stop}\n  details: {run_dir}/{statuses[0]}",
              file=sys.stderr, flush=True)
        raise stop
    summary = store.read_json(SUMMARY)
    if returncode == 0 and tag and not hosts_rank_zero(run_dir, pid):
        results = (f"{run_dir} (written by the node that hosted rank 0)" if store.path(RANK_ZERO).exists()
                   else "the run directory of the node that hosted rank 0 (give every node one shared "
                        "hydra.run.dir to have them here)")
        for name in statuses:
            store.set_status("done", name=name, ended=ended, elapsed_s=ended - started, results=results)
        print(f"node done: this node's ranks finished; the results are in {results}", flush=True)
        return {"status": "done", "node": tag, "results": results}
    if returncode == 0 and summary is not None:
        for name in statuses:
            store.set_status("done", name=name, ended=ended, elapsed_s=ended - started)
        print(format_summary(summary, str(run_dir)), flush=True)
        return {"status": "done", **summary}
    blame = explain(run_dir, returncode, pid, command[1:3] == ["-m", "experiments.engine.launcher.agent"], report, ended,
                    cfg.launcher.timeout_s, per_process)
    hint = rendezvous_error(cfg, ended - started)
    if hint is not None and blame["cause"]["process"] == "torchrun" and blame["cause"]["kind"] == "error":
        blame["error"] = blame["cause"]["text"] = hint  # torchrun's own failure: nodes that never joined
    for name in statuses:
        store.set_status("failed", name=name, ended=ended, returncode=returncode, **blame)
    if owner:
        finish_wandb(run_dir, blame)
    print(f"{line_start(cfg.logger.progress)}run failed: {blame['error']}\n  details: {run_dir}/{statuses[0]} "
          f"(cause and consequences) and {ERROR_FILES}", file=sys.stderr, flush=True)
    return {"status": "failed", "error": blame["error"]}
