"""Training outcome: accuracy against epochs and against time (measured, and modelled when
the runs log time/exchange_model_ms), with the dense baseline, and the error-feedback residual."""
from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from analysis import columns as c
from analysis.figures.style import base_method, finish, method_color, method_worker_handles, new_figure, series_labels
from analysis.tables import RunTables
from analysis.timeline import elapsed_at_evals, per_step_ms

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
    """(label, workers, curve) with the curve averaged over seeds at each x."""
    frame = frame.assign(series=lambda f: series_labels(f)).dropna(subset=[x, y])
    for (label, workers), group in frame.groupby(["series", "workers"], sort=True):
        yield label, int(workers), group.groupby(x)[y].mean().sort_index()


def accuracy_curves(tables: RunTables) -> Figure | None:
    """Eval accuracy against epoch, against measured training time and, when the runs log
    time/exchange_model_ms, against modelled time. One line per method and worker count
    (mean over seeds); dense, the baseline, is the heavy black line."""
    epochs = tables.epochs
    if not c.has_data(epochs, c.ACCURACY):
        return None
    epochs = epochs.assign(
        measured_s=elapsed_at_evals(tables.steps, epochs, "measured"),
        modelled_s=elapsed_at_evals(tables.steps, epochs, "modelled"),
    )
    panels = [("epoch", "epoch"), ("measured_s", "training time, measured (s)")]
    if per_step_ms(tables.steps, "modelled") is not None:
        panels.append(("modelled_s", "training time, modelled network (s)"))
    figure, axes = new_figure(1, len(panels))
    worker_counts = sorted(int(w) for w in epochs["workers"].unique())
    labels = set()
    for axis, (x, xlabel) in zip(axes[0], panels):
        for label, workers, curve in _mean_curves(epochs, x, c.ACCURACY):
            axis.plot(curve.index, curve.to_numpy(), **_style(label, workers, worker_counts))
            labels.add(label)
        axis.set_xlabel(xlabel)
        axis.set_ylabel("eval accuracy")
    handles = method_worker_handles(labels, worker_counts, LINESTYLES)
    return finish(figure, "Accuracy vs epoch and vs time (dense baseline in black)", list(axes[0]), handles)


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
    return finish(figure, "Error-feedback residual over training", [axes[0, 0], axes[0, 1]], handles)
