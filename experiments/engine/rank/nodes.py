"""One run on several nodes: the same `python run.py ...` on each node, one torchrun agent each.

Every node derives the same rendezvous id from what it was asked to run, so nothing but the
command line has to be shared: `rdzv_id` defaults to a hash of the resolved config (which
includes `tag`, a name the user can give to tell two otherwise equal runs apart) and of
`launcher.nnodes`. It holds no time and no path, so nodes that compose the same config
rendezvous together whether or not they share a run directory.

Which node hosts rank 0 is decided by torchrun's rendezvous, after launch. That node writes the
run's files (metrics.jsonl, summary.json, status.json); every node also keeps files of its own,
suffixed with a node tag (its host name and run.py's pid), so that nodes sharing one run
directory never overwrite each other:

    env.<tag>.json      the node's environment (the ranks of that node read it)
    status.<tag>.json   how the node's part ended (the node hosting rank 0 writes status.json)
    agent.<tag>.json    torchrun's report (agent.py)
    rank0.json          written by rank 0: the host and torchrun pid it runs under

A node without rank 0 ends `done` when its ranks did, and says where the results are. On one
node nothing is suffixed: env.json, status.json, agent.json. (The names, and `node_file` that
suffixes them, are experiments/runformat/run_dir.py's.)
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from experiments.runformat.run_dir import RANK_ZERO, write_atomic

ENV_FILE_VARIABLE = "SPARSEBENCH_ENV_FILE"  # the env.json a node's ranks read


def rendezvous_id(cfg: DictConfig) -> str:
    """launcher.rdzv_id, or a hash every node computes alike from the resolved config."""
    if cfg.launcher.rdzv_id:
        return str(cfg.launcher.rdzv_id)
    job = OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"])  # no run directory, no time
    text = OmegaConf.to_yaml(job, resolve=True)
    return "sb-" + hashlib.sha1(text.encode()).hexdigest()[:12]


def node_tag(cfg: DictConfig) -> str:
    """'' on one node; else '<host>-<pid>', unique among the nodes of a run."""
    if cfg.launcher.nnodes == 1:
        return ""
    return f"{socket.gethostname()}-{os.getpid()}"


def record_rank_zero(run_dir: Path) -> None:
    """Called by the process hosting rank 0: which host and torchrun it runs under."""
    record = {"host": socket.gethostname(), "agent_pid": os.getppid(), "pid": os.getpid()}
    write_atomic(run_dir / RANK_ZERO, json.dumps(record) + "\n")


def hosts_rank_zero(run_dir: Path, agent_pid: int) -> bool:
    """Whether the torchrun this node started (pid `agent_pid`) hosted rank 0."""
    try:
        record: dict[str, Any] = json.loads((run_dir / RANK_ZERO).read_text())
    except (OSError, ValueError):
        return False
    return record.get("host") == socket.gethostname() and record.get("agent_pid") == agent_pid
