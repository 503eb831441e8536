"""env.json: what produced a run (versions, commit, host, device, threads), and the runtime
choices resolved once in the parent (device, backend, processes) that every rank then reads.

No environment variable is copied wholesale: secrets such as WANDB_API_KEY never reach a file.
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

PACKAGES = ("torch", "torchvision", "numba", "hydra-core", "omegaconf", "wandb", "numpy", "pandas", "matplotlib")
REPO_ROOT = Path(__file__).resolve().parents[1]


def resolve_runtime(cfg: DictConfig) -> dict[str, Any]:
    """Device, backend, process and thread counts, decided once for every rank of the run."""
    import torch

    processes = cfg.processes if cfg.processes is not None else cfg.workers
    per_node = processes // cfg.launcher.nnodes
    device = cfg.device
    if device == "auto":
        # One GPU per process is what NCCL needs; with fewer GPUs, the CPU (gloo) is the honest choice.
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        device = "cuda" if gpus >= per_node else "cpu"
    backend = cfg.launcher.backend
    if backend == "auto":
        backend = "nccl" if device == "cuda" else "gloo"
    # rank_order promises the same bits however the ranks are hosted, and torch's CPU kernels
    # split their reductions (a conv's weight gradient over the batch) by thread: every layout
    # then gets the thread count of one rank per process.
    workers_per_node = cfg.workers // cfg.launcher.nnodes
    threads_for = workers_per_node if cfg.reduction == "rank_order" else per_node
    threads = cfg.launcher.threads_per_process or max(1, (os.cpu_count() or 1) // threads_for)
    return {
        "device": device,
        "backend": backend,
        "processes": processes,
        "processes_per_node": per_node,
        "ranks_per_process": cfg.workers // processes,
        "world": "distributed" if processes == cfg.workers else "hosted",
        "threads_per_process": threads,
    }


def _git(*args: str) -> str | None:
    try:
        result = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def _versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def _device_description() -> dict[str, Any]:
    import torch

    description: dict[str, Any] = {"cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count()}
    if torch.cuda.is_available():
        description["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        description["cuda"] = torch.version.cuda
    return description


def collect_environment(resolved: dict[str, Any], job: dict[str, Any]) -> dict[str, Any]:
    """Everything env.json records."""
    status = _git("status", "--porcelain")
    return {
        "versions": _versions(),
        "git": {"commit": _git("rev-parse", "HEAD"), "dirty": bool(status) if status is not None else None},
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "argv": sys.argv,
        "device": _device_description(),
        "threads": {"per_process": resolved["threads_per_process"], "OMP_NUM_THREADS": str(resolved["threads_per_process"])},
        "resolved": resolved,
        "job": job,
    }
