"""The three tidy tables every analysis works on, and how they are put together.

runs    one row per run: the key columns below, `error`, `warmup_steps`, `log_every`, `scope`,
        the whole config flattened as `cfg.<dotted.key>`, the scalar numbers of summary.json
        under their metric names (`eval/accuracy`, `time/select_ms_max`, ...), and what loading
        saw: `train_rows`, `eval_rows`, `last_step`, `metrics_cut` (last line cut by a kill),
        `bad_lines`. Failed and unfinished runs are rows like any other, with their `status`.
steps   wide: one row per logged train step of every run; the key columns, `step`, `epoch`,
        `after_warmup` (step >= the run's warmup_steps: timing statistics use only these) and one
        column per metric, named as in metrics.jsonl. List-valued method state (partition
        boundaries, DEFT's per-unit lists) holds one array per cell.
epochs  one row per evaluation: the key columns, `step`, `epoch`, `eval/*`.

Key columns, on every table: run_id, method, sparsifier, density, workers, processes, world,
model, dataset, seed, group, status, run_dir. `method` is the sparsifier's name, extended with
the knobs that tell its runs apart (analysis.labels). Other config values: merge the runs table
on run_id.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from analysis.columns import KEYS
from analysis.labels import method_labels

_RUN = "__run"  # row -> run position, while assembling


@dataclass
class RunTables:
    """runs, steps and epochs (see the module docstring for their columns)."""

    runs: pd.DataFrame
    steps: pd.DataFrame
    epochs: pd.DataFrame


def assemble(infos: list[dict[str, Any]], metrics: list[pa.Table | None]) -> RunTables:
    """Builds the tables from each run's description and metrics table (None: no metrics yet)."""
    runs = pd.DataFrame(infos) if infos else pd.DataFrame(columns=[k for k in KEYS if k != "method"])
    runs.insert(1, "method", method_labels(runs) if len(runs) else pd.Series(dtype=str))
    rows = _concat_metrics(metrics)
    run_index = rows.pop(_RUN).to_numpy() if _RUN in rows.columns else np.zeros(0, dtype=np.int64)
    is_eval = _eval_mask(rows)
    counts = len(runs)
    runs["train_rows"] = np.bincount(run_index[~is_eval], minlength=counts)[:counts]
    runs["eval_rows"] = np.bincount(run_index[is_eval], minlength=counts)[:counts]
    runs["last_step"] = _last_step(rows, run_index, counts)
    steps = _with_keys(_drop_empty(rows[~is_eval]), runs, run_index[~is_eval])
    epochs = _with_keys(_drop_empty(rows[is_eval]), runs, run_index[is_eval])
    if "step" in steps.columns:
        warmup = runs["warmup_steps"].fillna(0).to_numpy()[run_index[~is_eval]]
        steps.insert(steps.columns.get_loc("step") + 1, "after_warmup", steps["step"].to_numpy() >= warmup)
    return RunTables(runs=runs, steps=steps.drop(columns="kind", errors="ignore"),
                     epochs=epochs.drop(columns="kind", errors="ignore"))


def _concat_metrics(metrics: list[pa.Table | None]) -> pd.DataFrame:
    """All runs' rows in one frame, with the run's position in the `_RUN` column."""
    tables = []
    for position, table in enumerate(metrics):
        if table is None or table.num_rows == 0:
            continue
        tables.append(table.append_column(_RUN, pa.array(np.full(table.num_rows, position, dtype=np.int64))))
    if not tables:
        return pd.DataFrame({_RUN: np.zeros(0, dtype=np.int64), "step": np.zeros(0, dtype=np.int64)})
    try:
        return pa.concat_tables(tables, promote_options="permissive").to_pandas()
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        # a column whose type differs between runs (one run logged text): pandas keeps objects
        return pd.concat([table.to_pandas() for table in tables], ignore_index=True)


def _eval_mask(rows: pd.DataFrame) -> np.ndarray:
    """Eval rows say so in `kind`; rows without a kind are eval rows when they hold eval/*."""
    if "kind" in rows.columns:
        kind = rows["kind"].to_numpy(dtype=object)
        mask = kind == "eval"
        unknown = pd.isna(rows["kind"]).to_numpy()
    else:
        mask, unknown = np.zeros(len(rows), dtype=bool), np.ones(len(rows), dtype=bool)
    if unknown.any():
        eval_columns = [c for c in rows.columns if str(c).startswith("eval/")]
        has_eval = rows[eval_columns].notna().any(axis=1).to_numpy() if eval_columns else False
        mask = mask | (unknown & has_eval)
    return np.asarray(mask, dtype=bool)


def _last_step(rows: pd.DataFrame, run_index: np.ndarray, counts: int) -> np.ndarray:
    last = np.full(counts, np.nan)
    if "step" in rows.columns and len(rows):
        np.fmax.at(last, run_index, rows["step"].to_numpy(dtype=float))
    return last


def _drop_empty(frame: pd.DataFrame) -> pd.DataFrame:
    """Columns with no value in this kind of row (eval columns in train rows, and vice versa)."""
    empty = [c for c in frame.columns if c != "step" and not frame[c].notna().any()]
    return frame.drop(columns=empty).reset_index(drop=True)


def _with_keys(frame: pd.DataFrame, runs: pd.DataFrame, run_index: np.ndarray) -> pd.DataFrame:
    """Prepends the key columns; text keys are categoricals so a million rows stay small."""
    keys = {}
    for key in KEYS:
        if key not in runs.columns:
            continue
        column = runs[key]
        if column.dtype == object or pd.api.types.is_string_dtype(column):
            codes, uniques = pd.factorize(column, use_na_sentinel=True)
            keys[key] = pd.Categorical.from_codes(codes[run_index], categories=uniques)
        else:
            keys[key] = column.to_numpy()[run_index]
    return pd.concat([pd.DataFrame(keys), frame.drop(columns=list(keys), errors="ignore")], axis=1)
