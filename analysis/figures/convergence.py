"""Training outcome: each run's task metric (accuracy, perplexity, HR@10) against epochs and
against time (measured, and modelled when the runs log time/exchange_model_ms), with the dense
baseline, and the error-feedback residual."""
from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from analysis import columns as c
from analysis.figures.style import base_method, finish, method_color, method_worker_handles, new_figure, series_labels
from analysis.tables import RunTables
from analysis.tasks import metric_order
from analysis.timeline import elapsed_at_evals, per_step_ms
from experiments.runformat.headline import task_metric

LINESTYLES = ("-", "--", "-.", ":")


def _style(label: str, workers: int, worker_counts: list[int]) -> dict:
    """Colour by method, line style by worker count; dense is drawn heavier: it is the baseline."""
    method = base_method(label)
    return {
        "color": method_color(method),
        "linestyle": LINESTYLES[worker_counts.index(workers) % len(LINESTYLES)],
        "linewidth": 2.4 if method == c.DENSE else 1.4,
        "marker": "o",
        "markersize": 3,
    }


def _mean_curves(frame: pd.DataFrame, x: str, y: str):
    """(label, workers, curve) with the curve averaged over seeds at each x (epoch or step) or,
    on a time axis, at each evaluated step: y's mean against the seeds' mean time (seeds reach
    an evaluation at different times: averaging at each time would average nothing and zigzag
    between the seeds); labels from the frame's `series` column when it has one."""
    if "series" not in frame.columns:
        frame = frame.assign(series=series_labels(frame))
    frame = frame.dropna(subset=[x, y])
    for (label, workers), group in frame.groupby(["series", "workers"], sort=True):
        if x in ("epoch", "step"):
            yield label, int(workers), group.groupby(x)[y].mean().sort_index()
            continue
        means = group.groupby("step")[[x, y]].mean()  # one point per evaluation: the seeds' mean time and value
        yield label, int(workers), pd.Series(means[y].to_numpy(), index=means[x].to_numpy()).sort_index()


def task_metric_curves(tables: RunTables) -> Figure | None:
    """Each run's task metric (its summary's task.metric: accuracy, perplexity, HR@10) against
    epoch, against measured training time and, when the runs log time/exchange_model_ms, against
    modelled time. One line per method and worker count (mean over seeds); dense, the baseline,
    is the heavy black line. Runs of several tasks: one row of panels per metric."""
    epochs = tables.epochs
    metrics = [m for m in metric_order(epochs.get("task_metric", ())) if c.has_data(epochs, m)]
    if not metrics:
        return None
    epochs = epochs.assign(
        measured_s=elapsed_at_evals(tables.steps, epochs, "measured"),
        modelled_s=elapsed_at_evals(tables.steps, epochs, "modelled"),
        series=series_labels(epochs),  # over all rows: one label per method and workload in every row of panels
    )
    panels = [("epoch", "epoch"), ("measured_s", "training time, measured (s)")]
    if per_step_ms(tables.steps, "modelled") is not None:
        panels.append(("modelled_s", "training time, modelled network (s)"))
    figure, axes = new_figure(len(metrics), len(panels))
    worker_counts = sorted(int(w) for w in epochs["workers"].unique())
    labels, drawn = set(), []
    for row, metric in zip(axes, metrics):
        spec = task_metric(metric)
        rows = epochs[(epochs["task_metric"] == metric)].dropna(subset=[metric])
        rows = rows.assign(**{metric: spec.plotted(rows[metric])})
        drawn.append(rows)
        for axis, (x, xlabel) in zip(row, panels):
            for label, workers, curve in _mean_curves(rows, x, metric):
                axis.plot(curve.index, curve.to_numpy(), **_style(label, workers, worker_counts))
                labels.add(label)
            axis.set_xlabel(xlabel)
            axis.set_ylabel(spec.axis_label())
    handles = method_worker_handles(labels, worker_counts, LINESTYLES)
    name = task_metric(metrics[0]).label if len(metrics) == 1 else "Task metrics"
    baseline = " (dense baseline in black)" if (epochs["sparsifier"].astype(str) == c.DENSE).any() else ""
    title = f"{name[:1].upper()}{name[1:]} vs epoch and vs time{baseline}"
    return finish(figure, title, list(axes.flat), handles, data=pd.concat(drawn))


# The figure's name before runs had tasks; notebooks and scripts may still call it.
accuracy_curves = task_metric_curves


def residual_norm(tables: RunTables) -> Figure | None:
    """Error-feedback residual over training: ||residual|| (mean over ranks) and
    ||residual|| / ||acc||. Methods without a residual (dense: always 0) are left out."""
    steps = tables.steps
    if not c.has_data(steps, c.RESIDUAL):
        return None
    keep = steps.groupby("method", observed=True)[c.RESIDUAL].transform(lambda v: v.fillna(0).abs().max() > 0)
    steps = steps[keep.astype(bool)]
    if steps.empty:
        return None
    figure, axes = new_figure(1, 2)
    worker_counts = sorted(int(w) for w in steps["workers"].unique())
    labels = set()
    for axis, column, ylabel in (
        (axes[0, 0], c.RESIDUAL, "||residual|| (mean over ranks)"),
        (axes[0, 1], c.REL_RESIDUAL, "||residual|| / ||acc||"),
    ):
        if not c.has_data(steps, column):
            continue
        for label, workers, curve in _mean_curves(steps, "step", column):
            axis.plot(curve.index, curve.to_numpy(), **{**_style(label, workers, worker_counts), "marker": None})
            labels.add(label)
        axis.set_xlabel("step")
        axis.set_ylabel(ylabel)
    handles = method_worker_handles(labels, worker_counts, LINESTYLES)
    return finish(figure, "Error-feedback residual over training", [axes[0, 0], axes[0, 1]], handles, data=steps)
