"""What the report's tables show and how their cells read: the per-method summary (mean ± std
over seeds) and the runs that did not finish.

Runs of different tasks have different headline metrics (accuracy, perplexity, HR@10). The
summary gives each metric present its own column, titled and formatted by the metric (accuracy
and HR@10 as %, perplexity as a number, "(lower is better)" in its title), and a row fills only
the column of its own task ("-" elsewhere): a column never mixes units, and a report of one task
reads as before, with one metric column. When any row trained on stand-in data, a `data` column
says which rows did ("stand-in" or "real") and `stand_in_notes` says what the stand-ins were.
"""
from __future__ import annotations

import pandas as pd

from analysis.markdown import mean_std
from analysis.tasks import is_stand_in, metric_order, metric_spec, stand_in_what

# stat -> (column title, number format); the summary table's columns after the metric columns, in order.
SHOWN = {
    "select_ms_max": ("select ms max", "{:.4g}"),
    "select_ms_mean": ("select ms mean", "{:.4g}"),
    "mb_sent": ("MB sent/rank/step", "{:.4f}"),
    "traffic_ratio": ("traffic ratio", "{:.4f}"),
    "density_error": ("density error", "{:+.3f}"),
    "abs_density_error": ("abs density error", "{:.3f}"),
    "buildup": ("build-up", "{:.3f}"),
    "load_imbalance": ("load imbalance", "{:.3f}"),
}
KEY_TITLES = {"method": "method", "density": "density", "workers": "W", "world": "world", "model": "model", "dataset": "dataset"}
ALWAYS = ("method", "density", "workers", "world")


def summary_cells(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary of analysis.stats.summarize as text cells. model and dataset appear only when
    they vary, `data` only when some row is a stand-in; one column per task metric present (see
    the module docstring); a stat's std appears after ± when there are several seeds."""
    cells = pd.DataFrame(index=summary.index)
    for key, title in KEY_TITLES.items():
        if key in ALWAYS or summary[key].nunique(dropna=False) > 1:
            cells[title] = summary[key].map(_plain)
    stand_in = summary["data_source"].map(is_stand_in)
    if stand_in.any():
        cells["data"] = stand_in.map({True: "stand-in", False: "real"})
    cells["runs"] = summary["runs"].astype(str)
    for metric in metric_order(summary["task_metric"]):
        spec = metric_spec(metric)
        mine = summary["task_metric"] == metric
        pairs = zip(summary["metric"], summary["metric_std"])
        cells[spec.title] = [mean_std(spec.fmt)(pair) if own else "-" for pair, own in zip(pairs, mine)]
    for stat, (title, fmt) in SHOWN.items():
        pairs = zip(summary[stat], summary[f"{stat}_std"])
        cells[title] = [mean_std(fmt)(pair) for pair in pairs]
    return cells.reset_index(drop=True)


def stand_in_notes(summary: pd.DataFrame) -> list[str]:
    """One line per stand-in data source among the summary's rows: "cifar10: synthetic ..."."""
    rows = summary[summary["data_source"].map(is_stand_in)]
    pairs = rows[["dataset", "data_source"]].drop_duplicates()
    return [f"{_plain(dataset)}: {stand_in_what(source)}" for dataset, source in pairs.itertuples(index=False)]


def problem_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Every run whose status is not `done`, and every run whose metrics lost a line, with what
    it logged and why it stopped."""
    mask = (runs["status"] != "done") | runs["metrics_cut"].astype(bool) | (runs["bad_lines"] > 0)
    rows = runs[mask]
    notes = [_note(row) for _, row in rows.iterrows()]
    return pd.DataFrame({
        "run": rows["name"].astype(str),
        "method": rows["method"].astype(str),
        "W": rows["workers"].map(_plain),
        "status": rows["status"].astype(str),
        "train rows": rows["train_rows"].astype(str),
        "last step": rows["last_step"].map(_plain),
        "note": notes,
    }).reset_index(drop=True)


def _note(row: pd.Series) -> str:
    parts = []
    if isinstance(row.get("error"), str) and row["error"]:
        parts.append(row["error"][:200])
    if row["metrics_cut"]:
        parts.append("last metrics line cut mid-write (complete lines kept)")
    if row["bad_lines"]:
        parts.append(f"{row['bad_lines']} unreadable metrics line(s) skipped")
    if row["status"] == "running":
        parts.append("no end recorded: still running, or killed")
    if row["status"] == "missing":
        parts.append("no status.json")
    return "; ".join(parts)


def _plain(value: object) -> str:
    """Integral floats without the .0 (worker counts, steps); '-' for missing."""
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1:
        return str(int(value))
    return str(value)
