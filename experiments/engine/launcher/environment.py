"""env.json: what produced a run (versions, commit, host, device, threads), and the runtime
settings resolved once in the parent (experiments/runformat/runtime.py) that every rank then reads.

The device section names what makes float results differ between machines that run the same
code and versions (docs/reproducibility.md): the CPU model, the instruction set torch's kernels
dispatch to (`cpu_capability`: AVX2 and AVX512 kernels sum in different orders), and the BLAS
and oneDNN builds behind matrix products and convolutions; and the GPU (`gpu`: name, compute
capability, driver, CUDA and cuDNN versions; None everywhere on a machine without one).

No environment variable is copied wholesale: secrets such as WANDB_API_KEY never reach a file.
"""
from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from experiments.runformat.runtime import Runtime

PACKAGES = ("torch", "torchvision", "numba", "hydra-core", "omegaconf", "wandb", "numpy", "pandas", "matplotlib")
REPO_ROOT = Path(__file__).resolve().parents[3]  # experiments/engine/launcher/ is three below the repository


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


def cpu_model() -> str | None:
    """The CPU's marketing name ("AMD EPYC 7763 64-Core Processor"), from /proc/cpuinfo on Linux;
    platform.processor() elsewhere (an empty string there becomes None)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Model", "cpu model")):
                return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    return platform.processor() or None


def math_libraries(build: str) -> dict[str, str | None]:
    """The BLAS and oneDNN that torch was built with, from `torch.__config__.show()`'s text."""
    def find(pattern: str) -> str | None:
        found = re.search(pattern, build)
        return found.group(1).strip() if found else None

    return {
        "blas": find(r"BLAS_INFO=([^,\s]+)"),
        "blas_version": find(r"Math Kernel Library Version ([\d.]+)") or find(r"OpenBLAS ([^\s]+)"),
        "onednn": find(r"(?:MKL-DNN|oneDNN) (v[^\s]+)"),
    }


def _device_description() -> dict[str, Any]:
    import torch

    description: dict[str, Any] = {
        "cpu": platform.processor() or platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),  # the kernels torch dispatches to
        **math_libraries(torch.__config__.show()),
        "cpu_count": os.cpu_count(),
    }
    if torch.cuda.is_available():
        description["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        description["cuda"] = torch.version.cuda
    description["gpu"] = gpu_description()
    return description


GPU_KEYS = ("name", "capability", "driver", "cuda", "cudnn", "count")


def gpu_description(cuda_available: bool | None = None, properties=None, driver: str | None = None) -> dict[str, Any]:
    """The GPU a CUDA run computes on (the first one; a machine's GPUs are one model here), as
    the CPU section names the CPU: name, compute capability ("9.0"), driver, the CUDA and cuDNN
    versions torch uses, and how many GPUs. None everywhere on a machine without CUDA. The
    arguments stand in for this machine's (tests pass a fake)."""
    import torch

    cuda_available = torch.cuda.is_available() if cuda_available is None else cuda_available
    if not cuda_available:
        return dict.fromkeys(GPU_KEYS)
    properties = torch.cuda.get_device_properties(0) if properties is None else properties
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "name": properties.name,
        "capability": f"{properties.major}.{properties.minor}",
        "driver": driver if driver is not None else nvidia_driver(),
        "cuda": torch.version.cuda,
        "cudnn": str(cudnn) if cudnn is not None else None,
        "count": torch.cuda.device_count(),
    }


def nvidia_driver() -> str | None:
    """The driver version nvidia-smi reports ("580.159"), None without nvidia-smi."""
    try:
        result = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = result.stdout.strip().splitlines() if result.returncode == 0 else []
    return lines[0].strip() or None if lines else None


def collect_environment(runtime: Runtime, job: dict[str, Any]) -> dict[str, Any]:
    """Everything env.json records."""
    # Dirty: a tracked file differs from the commit (the code that ran is not the commit's). Files
    # git does not track, such as a study's output folder inside the clone, change no code.
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "versions": _versions(),
        "git": {"commit": _git("rev-parse", "HEAD"), "dirty": bool(status) if status is not None else None},
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "argv": sys.argv,
        "device": _device_description(),
        "threads": {"per_process": runtime.threads_per_process, "OMP_NUM_THREADS": str(runtime.threads_per_process)},
        "resolved": runtime.to_dict(),
        "job": job,
    }
