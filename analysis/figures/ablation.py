"""The DGC paper's ablation: runs of one sparsifier that differ in its knobs (momentum
correction, clipping, warm-up, ...: conf/sparsifier/dgc.yaml), as training loss and task metric
curves per epoch, one curve per variant, beside dense when the runs include it."""
from __future__ import annotations

import matplotlib
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from analysis import columns as c
from analysis.figures.style import finish, new_figure
from analysis.labels import knob_text, varying_knobs
from analysis.tables import RunTables
from analysis.tasks import metric_order
from experiments.runformat.headline import task_metric

# Keys that join a variant's label when they differ among the runs shown (density too: a
# variant is a set of knob values, and density is one, though a sweep of it alone is no ablation).
_CONTEXT = (("workers", "W="), ("model", ""), ("dataset", ""))


def dgc_ablation(tables: RunTables, method: str = "dgc") -> Figure | None:
    """Train loss (mean over each epoch's logged steps) and the task metric (each epoch's
    evaluation) against epoch: one curve per variant of `method`, labelled by the knobs that
    differ among its runs (mean over seeds), and dense, heavy and black, where runs on the same
    model and dataset include it. None unless some knob other than density differs."""
    runs = tables.runs[tables.runs["sparsifier"] == method]
    if runs.empty or not varying_knobs(runs):
        return None
    knobs = varying_knobs(runs, exclude={"name"})
    workload = ["model", "dataset", "data_source"]  # dense counts as a baseline on the same model and data only
    candidates = tables.runs[tables.runs["sparsifier"] == c.DENSE]
    same = candidates[workload].astype(str).apply(tuple, axis=1).isin(set(runs[workload].astype(str).apply(tuple, axis=1)))
    dense = candidates[same]
    shown = pd.concat([runs, dense])
    variants = _variant_labels(runs, knobs, shown)
    labels = pd.concat([variants, _variant_labels(dense, [], shown, name=c.DENSE)])
    colors = {label: matplotlib.colormaps["tab10"](i % 10) for i, label in enumerate(sorted(set(variants)))}
    metrics = [m for m in metric_order(shown["task_metric"]) if c.has_data(tables.epochs, m)]
    figure, axes = new_figure(1, 1 + len(metrics))
    loss_axis = axes[0, 0]
    _curves(loss_axis, _per_epoch_loss(tables.steps, labels), labels, colors)
    loss_axis.set_ylabel("train loss (mean over the epoch)")
    for axis, metric in zip(axes[0, 1:], metrics):
        spec = task_metric(metric)
        rows = tables.epochs[tables.epochs["run_id"].isin(shown["run_id"]) & (tables.epochs["task_metric"] == metric)]
        _curves(axis, rows.assign(value=spec.plotted(rows[metric]))[["run_id", "epoch", "value"]].dropna(), labels, colors)
        axis.set_ylabel(spec.axis_label())
    for axis in axes[0]:
        axis.set_xlabel("epoch")
    title = f"{method.upper()} ablation: " + ", ".join(knob[len("cfg.sparsifier."):] for knob in knobs)
    return finish(figure, title, list(axes[0]), data=shown)


def _variant_labels(runs: pd.DataFrame, knobs: list[str], shown: pd.DataFrame, name: str | None = None) -> pd.Series:
    """run_id -> label: the knob values (or `name`), plus W, model and dataset when they vary
    among the runs `shown`."""
    context = [(key, prefix) for key, prefix in _CONTEXT if shown[key].nunique(dropna=False) > 1]
    labels = {}
    for _, row in runs.iterrows():
        parts = [name or knob_text(row, knobs, ", ")] + [f"{prefix}{row[key]}" for key, prefix in context]
        labels[row["run_id"]] = " ".join(parts)
    return pd.Series(labels, dtype=object)


def _per_epoch_loss(steps: pd.DataFrame, labels: pd.Series) -> pd.DataFrame:
    """run_id, epoch, value: each run's mean train/loss over the logged steps of each epoch."""
    rows = steps[steps["run_id"].isin(labels.index)]
    if not c.has_data(rows, c.LOSS):
        return pd.DataFrame(columns=["run_id", "epoch", "value"])
    rows = rows[["run_id", "epoch", c.LOSS]].dropna().astype({"run_id": str})
    return rows.groupby(["run_id", "epoch"])[c.LOSS].mean().rename("value").reset_index()


def _curves(axis: Axes, rows: pd.DataFrame, labels: pd.Series, colors: dict) -> None:
    """One line per label: `value` against epoch, averaged over the label's runs (seeds)."""
    rows = rows.assign(label=rows["run_id"].astype(str).map(labels))
    for label, group in rows.groupby("label", sort=True):
        curve = group.groupby("epoch")["value"].mean().sort_index()
        dense = label.split(" ")[0] == c.DENSE
        axis.plot(curve.index, curve.to_numpy(), "o-", markersize=3, label=label,
                  color="black" if dense else colors[label], linewidth=2.4 if dense else 1.4)
