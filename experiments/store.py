"""The local results store: one directory per run.

    config.yaml     resolved config (written once, before launch)
    env.json        versions, git commit, host, device, threads, job identity
    status.json     running | done | failed (with the error), rewritten atomically
    metrics.jsonl   one JSON object per line, append-only, flushed per line
    summary.json    final numbers, written atomically at the end
    checkpoints/    run-level checkpoints (checkpoint.py); metrics.dropped.jsonl after a resume

Atomic writes (temp file + rename) mean a crash leaves either the old file or the new one,
never half of one; appending and flushing line by line means a killed run keeps every complete
line it logged.
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, TextIO

CONFIG = "config.yaml"
ENV = "env.json"
STATUS = "status.json"
METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
DROPPED_METRICS = "metrics.dropped.jsonl"  # lines a resumed run logs again
PREVIOUS = "previous"  # earlier attempts' error files


def write_atomic(path: Path, text: str) -> None:
    """Writes `text` to `path` so that readers never see a partial file."""
    temp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(temp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def _jsonable(value: Any) -> Any:
    """JSON has no NaN or infinity: those become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dumps(record: dict[str, Any]) -> str:
    return json.dumps({key: _jsonable(value) for key, value in record.items()}, sort_keys=False)


class RunStore:
    """Reads and writes the files of one run directory."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)

    def path(self, name: str) -> Path:
        return self.dir / name

    def write_json(self, name: str, data: dict[str, Any]) -> None:
        write_atomic(self.path(name), json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")

    def read_json(self, name: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.path(name).read_text())
        except FileNotFoundError:
            return None

    def set_status(self, status: str, name: str = STATUS, **details: Any) -> None:
        """Rewrites status.json (or a node's own status file, `name`), keeping `started` and `resumes`."""
        previous = self.read_json(name) or {}
        record = {"status": status, "updated": time.time(), **details}
        for key in ("started", "resumes"):  # facts of the whole run, not of one attempt
            if key in previous:
                record.setdefault(key, previous[key])
        self.write_json(name, record)

    def status(self) -> dict[str, Any] | None:
        return self.read_json(STATUS)

    def drop_metrics_from(self, next_step: int) -> int:
        """metrics.jsonl without the steps from `next_step` on, which go to metrics.dropped.jsonl."""
        return truncate_metrics(self.path(METRICS), next_step, self.path(DROPPED_METRICS))

    def set_aside(self, names: list[str], attempt: str) -> None:
        """Files of an earlier attempt (a resumed or restarted run's error files) move to
        previous/<attempt>/: kept, but no longer read as this attempt's."""
        present = [name for name in names if self.path(name).exists()]
        if present:
            aside = self.dir / PREVIOUS / attempt
            aside.mkdir(parents=True, exist_ok=True)
            for name in present:
                self.path(name).rename(aside / name)

    def open_metrics(self) -> "MetricsWriter":
        return MetricsWriter(self.path(METRICS))


class MetricsWriter:
    """Appends one JSON line per record and flushes it at once."""

    def __init__(self, path: Path) -> None:
        self._handle: TextIO = open(path, "a", buffering=1)

    def write(self, record: dict[str, Any]) -> None:
        self._handle.write(dumps(record) + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


def truncate_metrics(path: Path, next_step: int, aside: Path) -> int:
    """Before a resumed run appends to metrics.jsonl: keeps the lines of steps before
    `next_step` (what the checkpoint saw logged) and moves the rest, which the resumed run will
    log again, to `aside`, so that no step appears twice and nothing written is lost. A line cut
    by the kill goes aside too. Atomic: readers see the old file or the new one. Returns how
    many lines moved."""
    if not path.exists():
        return 0
    kept, moved = [], []
    for line in path.read_text().splitlines(keepends=True):
        try:
            record = json.loads(line) if line.endswith("\n") else None
        except json.JSONDecodeError:
            record = None
        (kept if record is not None and record.get("step", -1) < next_step else moved).append(line)
    if moved:
        with open(aside, "a") as handle:
            handle.writelines(line if line.endswith("\n") else line + "\n" for line in moved)
        write_atomic(path, "".join(kept))
    return len(moved)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Every complete line of a metrics.jsonl; a line cut by a kill is skipped, not fatal."""
    records = []
    with open(path) as handle:
        for line in handle:
            if not line.endswith("\n"):
                break  # the last line of a killed run
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records
