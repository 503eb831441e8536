"""Something a test session builds once, for every pytest-xdist worker.

`make test` runs two workers (pytest -n 2), each a process with its own session: a session
fixture used by modules on both workers is built twice. The analysis tests' real sweep (4 run.py
jobs, about 45 s on 2 busy cores) was. `built_once` builds into the temp folder the workers share
(the parent of each worker's own): the first worker to ask builds under a file lock, the others
wait for it and read what it built. Readers must leave it as built. Without xdist it is the
session's own temp folder, and the lock is uncontended.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock

DONE = ".built"  # written last: a folder without it was left by a build that failed


def shared_temp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temp folder of the whole test run: shared by the xdist workers, if any."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder `name`, filled by `build(folder)` once in the whole test run."""
    folder = shared_temp(tmp_path_factory) / name
    with FileLock(f"{folder}.lock"):
        if not (folder / DONE).exists():
            shutil.rmtree(folder, ignore_errors=True)  # a failed build's leftovers
            folder.mkdir(parents=True)
            build(folder)
            (folder / DONE).touch()
    return folder
