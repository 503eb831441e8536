"""The run folders read the plain way, for tests that check the analysis against them: each
run's config.yaml, summary.json and metrics.jsonl parsed with yaml and json (never through
analysis.load), train and eval rows split by their `kind`, and the few reductions the figures
and tables are documented to apply, written out here (median after warm-up, mean over logged
steps, last evaluation, std over seeds with ddof=1)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from experiments.runformat import metric_keys as k
from experiments.runformat import run_dir as files


@dataclass(frozen=True)
class RawStudy:
    """Every run below a folder: `runs` (one row per run: run, method, workers, seed,
    warmup_steps, status, the summary's task metric and its value, the sparsifier's knobs as
    `knob.<name>`), `train` and `evals` (one row per metrics.jsonl line of that kind, with the
    run's keys)."""

    runs: pd.DataFrame
    train: pd.DataFrame
    evals: pd.DataFrame


def read_study(*roots: Path) -> RawStudy:
    """The runs (folders holding a metrics.jsonl) at or below `roots`, finished or not."""
    runs, train, evals = [], [], []
    for root in roots:
        for metrics_path in sorted(Path(root).rglob(files.METRICS)):
            folder = metrics_path.parent
            config = yaml.safe_load((folder / files.CONFIG).read_text())
            status = json.loads((folder / files.STATUS).read_text())["status"]
            summary = json.loads((folder / files.SUMMARY).read_text()) if (folder / files.SUMMARY).exists() else {}
            metric = summary.get("task", {}).get("metric", k.ACCURACY)
            sparsifier = config["sparsifier"]
            keys = {"run": str(folder), "method": sparsifier["name"], "workers": int(config["workers"]), "seed": int(config["seed"])}
            knobs = {f"knob.{name}": value for name, value in sparsifier.items() if name not in ("_target_", "name", "density")}
            runs.append({**keys, "warmup_steps": int(config.get("warmup_steps", 0)), "status": status, "model": config["model"]["name"],
                         "task_metric": metric, "final": summary.get(metric, np.nan), **knobs})
            for line in metrics_path.read_text().splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:  # a killed run's last line, cut mid-write
                    continue
                (evals if row.get(k.ROW_KIND) == k.KIND_EVAL else train).append({**keys, **row})
    runs_frame = pd.DataFrame(runs)
    train_frame = pd.DataFrame(train).merge(runs_frame[["run", "warmup_steps"]], on="run")
    return RawStudy(runs_frame, train_frame, pd.DataFrame(evals))


def after_warmup(train: pd.DataFrame) -> pd.DataFrame:
    """The rows timing statistics use: step >= the run's warmup_steps (the synthetic and tiny
    runs all get past their warm-up, so the all-rows fallback is not needed here)."""
    late = train[train[k.ROW_STEP] >= train["warmup_steps"]]
    assert set(late["run"]) == set(train["run"]), "a run never got past its warm-up: add the fallback"
    return late


def per_run(train: pd.DataFrame, column: str, how: str, warmup: bool = False) -> pd.DataFrame:
    """One row per run (method, workers, seed, value): `how` ("median", "mean", "mean_abs") of
    `column` over its logged train rows (after warm-up when `warmup`)."""
    rows = after_warmup(train) if warmup else train
    values = rows[column].abs() if how == "mean_abs" else rows[column]
    reduce = "median" if how == "median" else "mean"
    return values.groupby([rows["method"], rows["workers"], rows["seed"]]).agg(reduce).rename("value").reset_index()


def over_seeds(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Mean and std (ddof=1, NaN for one seed) of `value` over the seeds of each `keys` group."""
    grouped = frame.groupby(keys)["value"]
    return pd.DataFrame({"mean": grouped.mean(), "std": grouped.std(ddof=1)}).reset_index()


def elapsed_at(train: pd.DataFrame, evals: pd.DataFrame, milliseconds: pd.Series) -> pd.Series:
    """Seconds of training before each evaluation: the sum of `milliseconds` (one value per train
    row) over its run's train steps up to and including the evaluated step. Valid for runs that
    log every step (log_every=1), as the synthetic ones do."""
    timed = train.assign(ms=milliseconds)
    result = []
    for _, row in evals.iterrows():
        mine = timed[(timed["run"] == row["run"]) & (timed[k.ROW_STEP] <= row[k.ROW_STEP])]
        result.append(mine["ms"].sum() / 1000.0)
    return pd.Series(result, index=evals.index, dtype=float)
