"""metrics.jsonl -> a run's train rows and eval rows as Arrow tables, fast, with a columnar
cache beside the file.

Parsing is Arrow's C++ JSON reader (about 10x faster than json.loads per line); files it cannot
read (a value changing type between rows, a corrupt line in the middle) go through a line-by-line
reader that keeps every line that parses. A line cut by a kill, i.e. text after the last newline,
is never parsed: it is reported as `cut`, matching experiments.runformat.run_dir.read_metrics.

The cache is keyed by the file's size and modification time, so a run still being written is
re-read whenever it grows; a cache that cannot be written (read-only store) is silently skipped.
It is an Arrow IPC (Feather v2) file, not Parquet: for tables this small (1,000 rows) reading
Parquet costs 2-7 ms per file in fixed overhead against 0.3-0.6 ms for IPC, and a study has
thousands of files (experiments/studies/benchmarks/load.py measures it).
"""
from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.feather as feather
import pyarrow.json as pa_json

from experiments.runformat.metric_keys import EVAL_PREFIX, KIND_EVAL, ROW_KIND
from experiments.runformat.run_dir import ANALYSIS_CACHE

CACHE_DIR = ANALYSIS_CACHE  # beside the metrics.jsonl it caches
CACHE_VERSION = 2  # bump when the parsed table's shape changes, so old caches are ignored
_META_CUT = b"sparsebench.cut"
_META_BAD = b"sparsebench.bad_lines"
_META_TRAIN = b"sparsebench.train_rows"  # the cache holds train rows first, then eval rows


@dataclass
class MetricsFile:
    """The complete lines of one metrics.jsonl, split by kind, and what had to be left out."""

    train: pa.Table
    evals: pa.Table
    cut: bool  # the last line was cut mid-write (a killed run)
    bad_lines: int  # complete lines that were not valid JSON


def cache_path(path: Path) -> Path | None:
    """Where the cached copy of `path` in its current state lives (None if `path` is absent)."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return path.parent / CACHE_DIR / f"metrics-v{CACHE_VERSION}-{stat.st_size}-{stat.st_mtime_ns}.arrow"


def read_metrics_file(path: Path, cache: bool = True) -> MetricsFile | None:
    """The metrics of one run (None when the run has no metrics.jsonl yet)."""
    cached = cache_path(path)
    if cached is None:
        return None
    if cache and cached.is_file():
        try:
            table = feather.read_table(cached, use_threads=False)
            meta = table.schema.metadata or {}
            train_rows = int(meta[_META_TRAIN])
            return MetricsFile(table.slice(0, train_rows), table.slice(train_rows), meta.get(_META_CUT) == b"1",
                               int(meta.get(_META_BAD, b"0")))
        except (OSError, KeyError, pa.ArrowException, ValueError):
            pass  # a damaged or older cache is rebuilt below
    parsed = parse_jsonl(path.read_bytes())
    if cache:
        _write_cache(cached, parsed)
    return parsed


def parse_jsonl(data: bytes) -> MetricsFile:
    """Every complete line of a JSON-lines byte string, split into train and eval rows."""
    end = data.rfind(b"\n") + 1
    cut = bool(data[end:].strip())
    body = data[:end]
    bad = 0
    if not body.strip():
        table = pa.table({})
    else:
        try:
            # use_threads=False: callers parallelise over files, which scales better than within one.
            options = pa_json.ReadOptions(use_threads=False, block_size=1 << 24)
            table = pa_json.read_json(io.BytesIO(body), read_options=options)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            table, bad = _parse_lines(body)
    is_eval = eval_mask(table)
    return MetricsFile(table.filter(pa.array(~is_eval)), table.filter(pa.array(is_eval)), cut, bad)


def eval_mask(rows: pa.Table) -> np.ndarray:
    """Eval rows say so in `kind`; rows without a kind are eval rows when they hold eval/*."""
    if ROW_KIND in rows.column_names:
        kind = rows.column(ROW_KIND)
        mask = pc.fill_null(pc.equal(kind, KIND_EVAL), False).to_numpy(zero_copy_only=False)
        unknown = pc.is_null(kind).to_numpy(zero_copy_only=False)
    else:
        mask, unknown = np.zeros(rows.num_rows, dtype=bool), np.ones(rows.num_rows, dtype=bool)
    if unknown.any():
        for name in rows.column_names:
            if name.startswith(EVAL_PREFIX):
                mask = mask | (unknown & pc.is_valid(rows.column(name)).to_numpy(zero_copy_only=False))
    return np.asarray(mask, dtype=bool)


def _parse_lines(body: bytes) -> tuple[pa.Table, int]:
    """The slow, forgiving path: json.loads per line, skipping lines that do not parse."""
    records, bad = [], 0
    for line in body.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            bad += 1
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            bad += 1
    return records_to_table(records), bad


def records_to_table(records: list[dict]) -> pa.Table:
    """Rows as dicts -> a table with every key as a column; a column Arrow cannot type (a value
    changing type between rows) becomes JSON text instead of failing the run."""
    frame = pd.DataFrame.from_records(records)
    columns = {}
    for name in frame.columns:
        try:
            columns[name] = pa.array(frame[name], from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            columns[name] = pa.array([None if _missing(v) else json.dumps(v) for v in frame[name]], pa.string())
    return pa.table(columns)


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def _write_cache(target: Path, parsed: MetricsFile) -> None:
    """Writes the cached copy atomically and removes copies of older states of the file."""
    meta = {_META_CUT: b"1" if parsed.cut else b"0", _META_BAD: str(parsed.bad_lines).encode(),
            _META_TRAIN: str(parsed.train.num_rows).encode()}
    table = pa.concat_tables([parsed.train, parsed.evals]).replace_schema_metadata(meta)
    try:
        target.parent.mkdir(exist_ok=True)
        temp = target.with_name(f".{target.name}.tmp{os.getpid()}")
        feather.write_feather(table, temp, compression="lz4")
        os.replace(temp, target)
        for stale in target.parent.glob("metrics-*.arrow"):
            if stale != target:
                stale.unlink(missing_ok=True)
    except OSError:
        pass  # a read-only store still loads, just without a cache
