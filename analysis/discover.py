"""Finding run directories below any set of paths (a run, a sweep, a whole outputs/ tree)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from experiments.runformat.run_dir import WANDB_DIR, holds_run

SKIPPED = (WANDB_DIR,)


def is_run_dir(path: Path) -> bool:
    """True when `path` looks like one run's directory."""
    return path.is_dir() and holds_run({entry.name for entry in os.scandir(path) if entry.is_file()})


def find_run_dirs(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Every run directory at or below `paths`, sorted, each once.

    Hidden folders (.hydra, caches) and W&B folders are not searched, and nothing below a run
    directory is, since runs do not nest.
    """
    found: set[Path] = set()
    for root in paths:
        root = Path(root)
        if not root.exists():
            raise FileNotFoundError(f"{root}: no such file or directory (expected a run or sweep directory)")
        found.update(_walk(root.resolve()))
    return sorted(found)


def _walk(root: Path) -> list[Path]:
    if is_run_dir(root):
        return [root]
    runs, pending = [], [root]
    while pending:
        directory = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except (PermissionError, NotADirectoryError):
            continue
        if holds_run({entry.name for entry in entries if entry.is_file()}):
            runs.append(Path(directory))
            continue
        pending.extend(
            entry.path for entry in entries
            if entry.is_dir() and not entry.name.startswith(".") and entry.name not in SKIPPED
        )
    return runs
