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
from analysis.settings import key_title, varying_in
from analysis.stats import STATS
from analysis.tasks import is_stand_in, metric_order, stand_in_what
from experiments.runformat.headline import task_metric

# The summary table's columns after the metric columns, in order: stats of analysis.stats,
# titled and formatted by the headline registry (experiments/runformat/headline.py). The density error is
# |U|/k - 1 (mean over logged steps, then over the later half: how a threshold controller settled).
SHOWN = ("select_ms_max", "select_ms_mean", "mb_sent", "traffic_ratio", "density_actual", "density_target",
         "density_error", "density_error_settled", "abs_density_error", "buildup", "load_imbalance")
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
    for column in varying_in(summary):  # the config keys that tell rows apart
        cells[key_title(column)] = summary[column].astype(str)
    if "status" in summary.columns:  # --include-unfinished: unfinished runs in rows of their own
        cells["status"] = summary["status"].astype(str)
    cells["runs"] = summary["runs"].astype(str)
    for metric in metric_order(summary["task_metric"]):
        spec = task_metric(metric)
        mine = summary["task_metric"] == metric
        pairs = zip(summary["metric"], summary["metric_std"])
        cells[spec.title] = [mean_std(spec.fmt)(pair) if own else "-" for pair, own in zip(pairs, mine)]
    for stat in SHOWN:
        spec = STATS[stat]
        pairs = zip(summary[stat], summary[f"{stat}_std"])
        cells[spec.title] = [mean_std(spec.fmt)(pair) for pair in pairs]
    return cells.reset_index(drop=True)


def stand_in_notes(summary: pd.DataFrame) -> list[str]:
    """One line per stand-in data source among the summary's rows: "cifar10: synthetic ..."."""
    rows = summary[summary["data_source"].map(is_stand_in)]
    pairs = rows[["dataset", "data_source"]].drop_duplicates()
    return [f"{_plain(dataset)}: {stand_in_what(source)}" for dataset, source in pairs.itertuples(index=False)]


def device_notes(runs: pd.DataFrame) -> list[str]:
    """What the report says when runs compared under reduction=rank_order (which promises the
    same bits for every layout) ran on different devices: CUDA and the CPU round differently,
    so their rows differ with no bug in either (device=auto picks by the GPU count per process,
    experiments/runtime.auto_device). The runs are rows of their own anyway (`env.device`)."""
    if "cfg.reduction" not in runs or "env.device" not in runs:
        return []
    compared = runs[(runs["cfg.reduction"] == "rank_order") & runs["env.device"].notna()]
    devices = compared["env.device"].value_counts().sort_index()
    if len(devices) < 2:
        return []
    each = ", ".join(f"{count} on {device}" for device, count in devices.items())
    return [f"Runs compared under reduction=rank_order ran on different devices ({each}): rank_order makes "
            f"layouts equal bit for bit on one device only (CUDA and the CPU round differently), so rows of "
            f"different `env.device` differ without a bug; run every layout with device=cpu (or device=cuda "
            f"with a GPU per process) to compare them."]


def problem_runs(runs: pd.DataFrame, nonfinite: pd.Series | None = None) -> pd.DataFrame:
    """Every run whose status is not `done`, every run with non-finite numbers (`nonfinite`:
    per run_id the reason, "" for none; analysis.stats.nonfinite_reasons), and every run whose
    metrics lost a line, with what it logged and why it stopped."""
    reasons = (nonfinite if nonfinite is not None else pd.Series(dtype=object)).reindex(runs["run_id"]).fillna("")
    reasons.index = runs.index
    mask = (runs["status"] != "done") | (reasons != "") | runs["metrics_cut"].astype(bool) | (runs["bad_lines"] > 0)
    rows = runs[mask]
    notes = ["; ".join(part for part in (reasons[index], _note(row)) if part) for index, row in rows.iterrows()]
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
