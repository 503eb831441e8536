"""What an executed notebook printed and displayed, checked against numbers recomputed from the
sweep's own files (tests/helpers/raw_runs.py), for test_analysis_notebooks: the status counts
every notebook prints, scaling.ipynb's summary table, convergence.ipynb's per-epoch tables.
A shown number equals the recomputed one to the last digit it shows. (The notebooks' figures
are analysis.figures' functions: tests/analysis/test_figure_data.py checks what they plot.)"""
from __future__ import annotations

import math
import re
from decimal import Decimal

import pandas as pd

from experiments.runformat import metric_keys as k
from tests.helpers.html_tables import read_tables
from tests.helpers.raw_runs import RawStudy, after_warmup, over_seeds, per_run

# Column title of the summary table -> (metric key, reduction of raw_runs.per_run, scale); the
# headline rule (experiments/runformat/headline.py, docs/metrics.md) written out: timings are medians
# after warm-up, the rest means over logged steps; MB are bytes * 1e-6.
SUMMARY_COLUMNS = {
    "select ms max": (k.SELECT_MAX, "median", 1.0),
    "select ms mean": (k.SELECT_MEAN, "median", 1.0),
    "MB sent/rank/step": (k.SENT_MAX, "mean", 1e-6),
    "traffic ratio": (k.RATIO, "mean", 1.0),
    "density actual": (k.DENSITY_ACTUAL, "mean", 1.0),
    "density target": (k.DENSITY_TARGET, "mean", 1.0),
    "error |U|/k-1": (k.DENSITY_ERROR, "mean", 1.0),
    "|error|": (k.DENSITY_ERROR, "mean_abs", 1.0),
    "build-up": (k.BUILDUP, "mean", 1.0),
    "load imbalance": (k.LOAD_IMBALANCE, "mean", 1.0),
}


def shown_as(cell: str, value: float) -> bool:
    """True when `cell` (e.g. "0.1711", "+0.810", "74.93%", "1.2e-05", "NaN") shows `value`
    rounded to its last digit."""
    text = cell.strip().lstrip("+")
    if text in ("NaN", "-"):
        return value is None or math.isnan(value)
    percent = text.endswith("%")
    number = Decimal(text.rstrip("%"))
    shown = float(number) / (100 if percent else 1)
    half_unit = 0.5 * 10.0 ** number.as_tuple().exponent / (100 if percent else 1)
    return abs(shown - value) <= half_unit * (1 + 1e-9) + 1e-15


def check_status_counts(printed: str, raw: RawStudy) -> None:
    """load_from_env prints the runs per status: the counts of the status.json files."""
    for status, count in raw.runs["status"].value_counts().items():
        assert re.search(rf"^{status}\s+{count}$", printed, re.MULTILINE), (status, count, printed)


def _settled(train: pd.DataFrame) -> pd.DataFrame:
    """Per run: the mean density error over the last ceil(m/2) of its m logged rows holding one."""
    rows = train.dropna(subset=[k.DENSITY_ERROR]).sort_values(k.ROW_STEP)
    later = rows.groupby("run", group_keys=False)[rows.columns].apply(lambda run: run.iloc[len(run) // 2:])
    return later.groupby(["method", "workers", "seed"])[k.DENSITY_ERROR].mean().rename("value").reset_index()


def _cell_pairs(per_run_values: pd.DataFrame) -> dict[tuple[str, int], tuple[float, float]]:
    summary = over_seeds(per_run_values, ["method", "workers"])
    return {(m, int(w)): (mean, std) for m, w, mean, std in summary[["method", "workers", "mean", "std"]].itertuples(index=False)}


def _shows_pair(cell: str, pair: tuple[float, float]) -> bool:
    """"m" for one seed (std NaN), "m ± s" for several."""
    mean, std = pair
    parts = cell.split(" ± ")
    return shown_as(parts[0], mean) and (shown_as(parts[1], std) if len(parts) == 2 else math.isnan(std))


def check_summary_table(html: list[str], raw: RawStudy) -> None:
    """scaling.ipynb's summary: one row per method and W, its run count, the task metric (the
    summary.json's, the last evaluation) and every headline column, as the headline rule says."""
    (table,) = [table for text in html for table in read_tables(text) if "select ms max" in table.head[0]]
    rows = table.records()
    runs = raw.runs.assign(value=raw.runs["final"])
    (metric,) = runs["task_metric"].unique()  # the tiny sweep has one task
    title = metric.split("/")[1]  # "accuracy": the registry's label of eval/accuracy
    expected = {
        title: _cell_pairs(runs[["method", "workers", "seed", "value"]]),
        "settled error": _cell_pairs(_settled(raw.train)),
        **{column: _cell_pairs(per_run(raw.train, key, how, warmup=how == "median").assign(value=lambda f: f["value"] * scale))
           for column, (key, how, scale) in SUMMARY_COLUMNS.items()},
    }
    counts = runs.groupby(["method", "workers"]).size()
    assert sorted((row["method"], int(row["W"])) for row in rows) == sorted(counts.index)
    after_warmup(raw.train)  # every run got past its warm-up: the medians above are over late steps only
    for row in rows:
        key = (row["method"], int(row["W"]))
        assert int(row["runs"]) == counts[key]
        for column, pairs in expected.items():
            assert _shows_pair(row[column], pairs[key]), (key, column, row[column], pairs[key])


def check_epoch_tables(html: list[str], raw: RawStudy) -> None:
    """convergence.ipynb's tables, one per task metric: mean, std (ddof=1) and count of each
    (method, W, epoch)'s evaluations of that metric."""
    tables = [table for text in html for table in read_tables(text) if table.head and table.head[0][-3:] == ["mean", "std", "count"]]
    metrics = sorted(raw.runs["task_metric"].unique())
    assert len(tables) == len(metrics)
    for table, metric in zip(tables, metrics):
        runs = set(raw.runs.loc[raw.runs["task_metric"] == metric, "run"])
        evals = raw.evals[raw.evals["run"].isin(runs)]
        grouped = evals.groupby(["method", "workers", k.ROW_EPOCH])[metric]
        expected = pd.DataFrame({"mean": grouped.mean(), "std": grouped.std(ddof=1), "count": grouped.size()})
        shown = {(row["method"], int(row["workers"]), int(row["epoch"])): row for row in table.records()}
        assert sorted(shown) == sorted(expected.index)
        for key, row in shown.items():
            assert int(row["count"]) == expected.loc[key, "count"], key
            assert shown_as(row["mean"], expected.loc[key, "mean"]) and shown_as(row["std"], expected.loc[key, "std"]), (key, row)
