"""The format of one run directory: its file names, how they are written and how they are read.

    config.yaml     resolved config (written once, before launch)
    env.json        versions, git commit, host, device, threads, job identity
    status.json     running | done | failed (with the error), rewritten atomically
    metrics.jsonl   one JSON object per line, append-only, flushed per line
    summary.json    final numbers, written atomically at the end
    metrics.dropped.jsonl   lines a resumed run logs again (experiments/runformat/store.py)
    previous/       earlier attempts' error files
    error.rank<P>.txt       the traceback of process P, if it raised (rank/worker.py)
    agent.json      torchrun's report (launcher/agent.py)
    rank0.json      the host and torchrun pid rank 0 ran under (rank/nodes.py)
    <name>.<node>.json      a node's own env/status/agent file on several nodes (`node_file`)
    wandb_run.json  rank 0's note of its W&B run (rank/wandb_failure.py); wandb/ W&B's files
    checkpoints/step-<s>/process-<P>.pt, complete.json     run-level checkpoints (rank/checkpoint.py)
    .resume.lock    held by the run.py resuming the run (launcher/resume.py)
    .cache/         caches of the run's processes (matplotlib); .analysis_cache/ the analysis's

The results store (experiments/runformat/store.py), the analysis loader, every other module and every test
that writes or reads a run file use the names here, so the format is stated once. The keys inside metrics.jsonl and
summary.json are experiments/runformat/metric_keys.py. On the bottom floor: it imports only the stdlib
and yaml, so the engine, the studies, the analysis and the tests may all import it.

Atomic writes (temp file + rename) mean a crash leaves either the old file or the new one,
never half of one; appending and flushing line by line means a killed run keeps every complete
line it logged, and the readers here skip a line cut by the kill.
"""
from __future__ import annotations

import json
import math
import os
import re
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
AGENT_REPORT = "agent.json"  # torchrun's report (launcher/agent.py), agent.<node>.json on several nodes
RANK_ZERO = "rank0.json"  # which host and torchrun hosted rank 0 (rank/nodes.py)
WANDB_RUN = "wandb_run.json"  # rank 0's note of its W&B run (rank/wandb_failure.py)
WANDB_DIR = "wandb"  # W&B's own files (offline runs, cache, config)
CACHE_DIR = ".cache"  # the run's processes' caches (matplotlib): never $HOME
ANALYSIS_CACHE = ".analysis_cache"  # the analysis's parsed metrics (analysis/metrics_io.py)
RESUME_LOCK = ".resume.lock"  # held by the run.py resuming the run (launcher/resume.py)
CHECKPOINTS = "checkpoints"  # run-level checkpoints, one folder per step (rank/checkpoint.py)
CHECKPOINT_MARKER = "complete.json"  # in a step's folder once every process's file is in place
ERROR_FILES = "error.rank*.txt"  # glob of every process's error file (`error_file`)
CHECKPOINT_STEPS = "step-*"  # glob of the checkpoint folders (`checkpoint_step`)
# Every fixed name above and the stems of the patterns below (tests/test_run_dir.py checks that no
# other file spells one).
FIXED_NAMES = (*RUN_FILES, DROPPED_METRICS, PREVIOUS, AGENT_REPORT, RANK_ZERO, WANDB_RUN, WANDB_DIR, CACHE_DIR,
               ANALYSIS_CACHE, RESUME_LOCK, CHECKPOINTS, CHECKPOINT_MARKER)
PATTERN_STEMS = ("error.rank", "step-", "process-")
_ERROR_FILE = re.compile(r"error\.rank(\d+)\.txt$")
_CHECKPOINT_STEP = re.compile(r"step-(\d+)$")

# The C loader is ~10x faster; 1,000 configs must not take seconds on their own.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# -- the per-process, per-step and per-node names -----------------------------------------------
def error_file(process: int | str) -> str:
    """The error file of torchrun's process `process` (its RANK): error.rank<P>.txt."""
    return f"error.rank{process}.txt"


def error_file_process(name: str) -> int | None:
    """The process whose error file is called `name`; None for any other file."""
    match = _ERROR_FILE.search(name)
    return None if match is None else int(match.group(1))


def checkpoint_step(step: int) -> str:
    """The folder (under CHECKPOINTS) of the checkpoint taken before `step`: step-<8 digits>."""
    return f"step-{step:08d}"


def checkpoint_step_of(name: str) -> int | None:
    """The step of a checkpoint folder called `name`; None for any other name."""
    match = _CHECKPOINT_STEP.match(name)
    return None if match is None else int(match.group(1))


def checkpoint_process_file(process: int) -> str:
    """One process's file in a checkpoint folder: process-<P>.pt."""
    return f"process-{process}.pt"


def node_file(name: str, tag: str) -> str:
    """`status.json` -> `status.<tag>.json`: a node's own copy on several nodes (unchanged when
    `tag` is '', one node); `tag` "*" makes the glob of every node's copy."""
    if not tag:
        return name
    stem, dot, suffix = name.rpartition(".")
    return f"{stem}.{tag}.{suffix}" if dot else f"{name}.{tag}"


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
