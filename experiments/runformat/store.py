"""The local results store: one directory per run, its files as experiments/runformat/run_dir.py
defines them (names, atomic writer, metrics appender, reader). What is the store's own behaviour
lives here: status updates that keep a run's history, and what a resume does to metrics.jsonl
(truncate_metrics) and to an earlier attempt's files (set_aside).

    checkpoints/    run-level checkpoints (checkpoint.py); metrics.dropped.jsonl after a resume
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from experiments.runformat.run_dir import (DROPPED_METRICS, METRICS, PREVIOUS, STATUS, MetricsWriter, read_json, write_atomic,
                                 write_json)


class RunStore:
    """Reads and writes the files of one run directory."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)

    def path(self, name: str) -> Path:
        return self.dir / name

    def write_json(self, name: str, data: dict[str, Any]) -> None:
        write_json(self.path(name), data)

    def read_json(self, name: str) -> dict[str, Any] | None:
        return read_json(self.path(name))

    def set_status(self, status: str, name: str = STATUS, **details: Any) -> None:
        """Rewrites status.json (or a node's own status file, `name`), keeping `started`, `resumes`
        and `damaged_checkpoints` (those resume= skipped, experiments/engine/launcher/resume.py)."""
        previous = self.read_json(name) or {}
        record = {"status": status, "updated": time.time(), **details}
        for key in ("started", "resumes", "damaged_checkpoints"):  # facts of the whole run, not of one attempt
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
