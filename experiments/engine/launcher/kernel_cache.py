"""The compiled selection kernels, compiled by run.py once, before the ranks start, when numba's
on-disk cache does not hold them yet.

numba compiles a kernel on its first call and keeps it in its cache on disk (cache=True in
sparsifiers/common/kernels/compiled.py); every rank warms the kernels up before step 0 (warm_up.py).
On a checkout that has never run them, or after the kernels changed, the cache is empty and every
rank process of the first run compiled every kernel itself, all at once: about 10 s of CPU each,
some 20 s of that run's start-up with 4 ranks on 2 cores. Compiled here first, alone, they are
loaded by the ranks (about 0.5 s each).

Whether to compile is decided without importing numba (that alone takes 0.3 s): a stamp beside
numba's cache records what the last compilation here was for (the kernels' source, numba's and
Python's versions). A stamp that matches while numba's cache was deleted only leaves the ranks
compiling, as they did before; the ranks' own warm-up is unchanged either way, so this never
changes what runs, only who compiles first.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import sys
from pathlib import Path

KERNELS_DIR = Path(__file__).resolve().parents[3] / "sparsifiers" / "common" / "kernels"
STAMP = "sparsebench-kernels.json"


def cache_dir() -> Path:
    """Where numba keeps the kernels: $NUMBA_CACHE_DIR, else __pycache__ beside compiled.py."""
    configured = os.environ.get("NUMBA_CACHE_DIR")
    return Path(configured) if configured else KERNELS_DIR / "__pycache__"


def fingerprint() -> str:
    """What a compilation is for: every kernel module (their calls decide the signatures),
    numba's version, Python's, the machine."""
    digest = hashlib.sha256()
    for path in sorted(KERNELS_DIR.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    try:
        numba = importlib.metadata.version("numba")
    except importlib.metadata.PackageNotFoundError:
        numba = None
    digest.update(json.dumps([numba, sys.version, platform.machine()]).encode())
    return digest.hexdigest()


def needed(kernels: str, device: str) -> bool:
    """Whether the ranks will run the compiled kernels and this machine has not compiled them."""
    if kernels == "torch" or device != "cpu":
        return False
    try:
        recorded = json.loads((cache_dir() / STAMP).read_text()).get("fingerprint")
    except (OSError, ValueError, AttributeError):
        recorded = None
    return recorded != fingerprint()


def prepare(kernels: str, device: str) -> bool:
    """Compiles the kernels into numba's cache if `needed`; returns whether it did. A failure here
    is left to the ranks, whose own warm-up reports it."""
    if not needed(kernels, device):
        return False
    from sparsifiers.common.kernels import compiled_available, warm_up

    if not compiled_available():
        return False
    print("compiling the selection kernels (numba, once per checkout)...", file=sys.stderr, flush=True)
    try:
        import torch

        warm_up(torch.float32, "cpu")
    except Exception:  # noqa: BLE001 - the ranks compile, and report, themselves
        return False
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
        (cache_dir() / STAMP).write_text(json.dumps({"fingerprint": fingerprint()}) + "\n")
    except OSError:
        pass  # compiled all the same; the next run checks again
    return True
