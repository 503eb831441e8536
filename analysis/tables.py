"""The three tidy tables every analysis works on, and how they are put together.

runs    one row per run: the key columns below, `error`, `warmup_steps`, `log_every`, `scope`,
        `task` and `higher_is_better` (analysis.tasks),
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
model, dataset, task_metric (the run's headline eval metric, e.g. eval/perplexity), data_source
(`real` or `stand-in: <what>`), seed, group, status, run_dir, settings (the config keys that tell
the run apart from the others loaded, "max_steps=3", analysis.settings). `method` is the sparsifier's name, extended with
the knobs that tell its runs apart (analysis.labels). Other config values: merge the runs table
on run_id.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from analysis.columns import KEYS, NUMERIC_KEYS
from analysis.labels import method_labels
from analysis.settings import settings_labels
from analysis.tasks import fill_task

_RUN = "__run"  # row -> run position, while assembling
# The runs table's own columns, present even when no run was found.
RUN_COLUMNS = (*[key for key in KEYS if key != "method"], "name", "error", "warmup_steps", "log_every", "scope",
               "task", "higher_is_better", "metrics_cut", "bad_lines")


@dataclass
class RunTables:
    """runs, steps and epochs (see the module docstring for their columns)."""

    runs: pd.DataFrame
    steps: pd.DataFrame
    epochs: pd.DataFrame

    def select(self, **conditions: Any) -> "RunTables":
        """The runs whose runs-table columns match, with their rows:
        select(status="done"), select(sparsifier=["micro", "exdyna"], workers=8)."""
        mask = pd.Series(True, index=self.runs.index)
        for column, wanted in conditions.items():
            values = list(wanted) if isinstance(wanted, (list, tuple, set, frozenset)) else [wanted]
            mask &= self.runs[column].isin(values)
        ids = set(self.runs.loc[mask, "run_id"])
        return RunTables(
            runs=self.runs[mask].reset_index(drop=True),
            steps=self.steps[self.steps["run_id"].isin(ids)].reset_index(drop=True),
            epochs=self.epochs[self.epochs["run_id"].isin(ids)].reset_index(drop=True),
        )


def assemble(infos: list[dict[str, Any]], train: list[pa.Table | None], evals: list[pa.Table | None]) -> RunTables:
    """Builds the tables from each run's description and its train and eval rows.

    Rows are keyed in Arrow and converted to pandas once per table: with a million rows,
    every pandas-level copy would cost about a second.
    """
    for info, rows in zip(infos, evals):
        fill_task(info, rows.column_names if rows is not None else ())
    runs = pd.DataFrame(infos) if infos else pd.DataFrame(columns=list(RUN_COLUMNS))
    runs.insert(1, "method", method_labels(runs) if len(runs) else pd.Series(dtype=str))
    runs["settings"] = settings_labels(runs)
    for key in NUMERIC_KEYS:
        runs[key] = pd.to_numeric(runs[key], errors="coerce")
    runs["train_rows"] = [t.num_rows if t is not None else 0 for t in train]
    runs["eval_rows"] = [t.num_rows if t is not None else 0 for t in evals]
    runs["last_step"] = [_last_step(t, e) for t, e in zip(train, evals)]
    steps = _to_frame(_concat_metrics(train), runs)
    epochs = _to_frame(_concat_metrics(evals), runs)
    if "step" in steps.columns and len(steps):
        warmup = runs.set_index("run_id")["warmup_steps"].fillna(0)
        threshold = steps["run_id"].map(warmup).to_numpy(dtype=float)
        steps.insert(steps.columns.get_loc("step") + 1, "after_warmup", steps["step"].to_numpy() >= threshold)
    return RunTables(runs=runs, steps=steps, epochs=epochs)


def _last_step(*tables: pa.Table | None) -> float:
    steps = [pc.max(t.column("step")).as_py() for t in tables if t is not None and "step" in t.column_names and t.num_rows]
    steps = [s for s in steps if s is not None]
    return float(max(steps)) if steps else float("nan")


def _concat_metrics(metrics: list[pa.Table | None]) -> pa.Table:
    """All runs' rows in one table, with the run's position in the `_RUN` column."""
    tables = []
    for position, table in enumerate(metrics):
        if table is None or table.num_rows == 0:
            continue
        tables.append(table.append_column(_RUN, pa.array(np.full(table.num_rows, position, dtype=np.int64))))
    if not tables:
        return pa.table({_RUN: pa.array([], pa.int64()), "step": pa.array([], pa.int64())})
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        # A column whose type differs between runs (one run logged text): fall back to JSON text
        # for the columns that disagree, so the rest stays numeric.
        return pa.concat_tables(_as_text_where_types_differ(tables), promote_options="permissive")


def _as_text_where_types_differ(tables: list[pa.Table]) -> list[pa.Table]:
    types: dict[str, set] = {}
    for table in tables:
        for field in table.schema:
            if not pa.types.is_null(field.type):
                types.setdefault(field.name, set()).add(field.type)
    clashing = {name for name, seen in types.items() if len(seen) > 1}
    fixed = []
    for table in tables:
        for name in clashing & set(table.column_names):
            values = [None if v is None else json.dumps(v) for v in table.column(name).to_pylist()]
            table = table.set_column(table.column_names.index(name), name, pa.array(values, pa.string()))
        fixed.append(table)
    return fixed


def _to_frame(rows: pa.Table, runs: pd.DataFrame) -> pd.DataFrame:
    """Key columns first (text keys as categoricals, so a million rows stay small), then the
    metrics; columns with no value in these rows (eval columns in train rows) are left out."""
    run_index = rows.column(_RUN).to_numpy()
    keys: dict[str, pa.Array] = {}
    for key in KEYS:
        if key not in runs.columns:
            continue
        column = runs[key]
        if key not in NUMERIC_KEYS:
            codes, uniques = pd.factorize(column.astype(object), use_na_sentinel=True)
            indices = pa.array(codes[run_index], mask=codes[run_index] < 0)
            keys[key] = pa.DictionaryArray.from_arrays(indices, pa.array([str(u) for u in uniques], pa.string()))
        else:
            keys[key] = pa.array(column.to_numpy()[run_index])
    metrics = [
        name for name in rows.column_names
        if name not in (_RUN, "kind") and name not in keys and (name == "step" or rows.column(name).null_count < rows.num_rows)
    ]
    table = pa.table({**keys, **{name: rows.column(name) for name in metrics}})
    return table.to_pandas(split_blocks=True)
