"""The format of one run directory: its file names, how they are written and how they are read.

    config.yaml     resolved config (written once, before launch)
    env.json        versions, git commit, host, device, threads, job identity
    status.json     running | done | failed (with the error), rewritten atomically
    metrics.jsonl   one JSON object per line, append-only, flushed per line
    summary.json    final numbers, written atomically at the end
    metrics.dropped.jsonl   lines a resumed run logs again (experiments/store.py)
    previous/       earlier attempts' error files

The results store (experiments/store.py), the analysis loader and every test that writes or
reads a run use this module, so the format is stated once. The keys inside metrics.jsonl and
summary.json are experiments/metric_keys.py. A neutral module: it imports only the stdlib and
yaml, so every role of experiments/, analysis and the tests may import it.

Atomic writes (temp file + rename) mean a crash leaves either the old file or the new one,
never half of one; appending and flushing line by line means a killed run keeps every complete
line it logged, and the readers here skip a line cut by the kill.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterable, TextIO

import yaml

CONFIG = "config.yaml"
ENV = "env.json"
STATUS = "status.json"
METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
DROPPED_METRICS = "metrics.dropped.jsonl"  # lines a resumed run logs again
PREVIOUS = "previous"  # earlier attempts' error files
RUN_FILES = (CONFIG, ENV, STATUS, METRICS, SUMMARY)

# The C loader is ~10x faster; 1,000 configs must not take seconds on their own.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# -- writing ----------------------------------------------------------------------------------
def write_atomic(path: Path, text: str, sync: bool = True) -> None:
    """Writes `text` to `path` so that readers never see a partial file. sync=False skips the
    fsync (the rename stays atomic): for files that need not survive a power cut, such as the
    thousands of synthetic runs of the load benchmark."""
    temp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(temp, "w") as handle:
        handle.write(text)
        handle.flush()
        if sync:
            os.fsync(handle.fileno())
    os.replace(temp, path)


def _jsonable(value: Any) -> Any:
    """JSON has no NaN or infinity: those become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _finite_only(value: Any) -> Any:
    """`value` with every non-finite float, at any depth, as None (JSON's null)."""
    if isinstance(value, dict):
        return {key: _finite_only(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_only(item) for item in value]
    return _jsonable(value)


def dumps(record: dict[str, Any]) -> str:
    """One metrics.jsonl record as one line of JSON (without the newline)."""
    return json.dumps(_finite_only(record), sort_keys=False, allow_nan=False)  # lists too (DEFT's unit norms)


def metrics_text(records: Iterable[dict[str, Any]]) -> str:
    """The content of a metrics.jsonl holding `records`, as MetricsWriter would write it."""
    return "".join(dumps(record) + "\n" for record in records)


def json_text(data: dict[str, Any]) -> str:
    """The content of status.json, env.json or summary.json holding `data`. A non-finite number
    is written as null, as in metrics.jsonl: Python's `NaN`/`Infinity` tokens are not JSON, and
    other readers (jq, browsers, W&B) reject them."""
    return json.dumps(_finite_only(data), indent=2, sort_keys=True, default=str, allow_nan=False) + "\n"


def write_json(path: Path, data: dict[str, Any], sync: bool = True) -> None:
    """status.json, env.json or summary.json, atomically."""
    write_atomic(path, json_text(data), sync=sync)


def write_yaml(path: Path, data: dict[str, Any], sync: bool = True) -> None:
    """A config.yaml from a plain mapping (the launcher writes the resolved Hydra config itself)."""
    write_atomic(path, yaml.safe_dump(data, sort_keys=False), sync=sync)


class MetricsWriter:
    """Appends one JSON line per record to a metrics.jsonl and flushes it at once."""

    def __init__(self, path: Path) -> None:
        self._handle: TextIO = open(path, "a", buffering=1)

    def write(self, record: dict[str, Any]) -> None:
        self._handle.write(dumps(record) + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


# -- reading ----------------------------------------------------------------------------------
def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Every complete line of a metrics.jsonl; a line cut by a kill is skipped, not fatal, and so
    is a complete line that is not JSON. (analysis/metrics_io.py is the columnar fast path for
    the same rule.)"""
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


def read_json(path: Path) -> dict[str, Any] | None:
    """A run file's JSON object; None when the file is absent. A damaged file raises
    json.JSONDecodeError: the store and the resume checks must tell damaged from absent."""
    try:
        with open(path) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None


def try_read_json(path: Path) -> dict[str, Any] | None:
    """A run file's JSON object; None when absent, unreadable or not an object (a run cut short):
    what the analysis reads, which must never fail on one run."""
    try:
        data = read_json(path)
    except (json.JSONDecodeError, UnicodeDecodeError, IsADirectoryError):
        return None
    return data if isinstance(data, dict) else None


def try_read_yaml(path: Path) -> dict[str, Any] | None:
    """A config.yaml's mapping; None when absent, unreadable or not a mapping."""
    try:
        with open(path) as handle:
            data = yaml.load(handle, Loader=_LOADER)
    except (FileNotFoundError, IsADirectoryError, yaml.YAMLError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def holds_run(file_names: set[str]) -> bool:
    """True when a directory holding these files is one run: a status marker, or a config next
    to what a run writes (config.yaml alone is not enough: Hydra's .hydra/ folder holds one too)."""
    return STATUS in file_names or (CONFIG in file_names and (ENV in file_names or METRICS in file_names))
