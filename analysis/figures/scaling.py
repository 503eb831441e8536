"""How the methods scale with the worker count: selection time, build-up and density, and the
compression ratio error (the DEFT/MiCRO/ExDyna papers' scaling figures)."""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from analysis import columns as c
from analysis.figures.style import finish, method_color, base_method, new_figure, series_labels, workers_axis
from analysis.stats import timing_rows
from analysis.tables import RunTables


def selection_time_vs_workers(tables: RunTables) -> Figure | None:
    """Median selection time (slowest rank) against W per method; the band spans the 25th to
    75th percentile over post-warm-up steps of all seeds."""
    steps = tables.steps
    if not c.has_data(steps, c.SELECT_MAX):
        return None
    rows = steps[timing_rows(steps)].assign(series=lambda f: series_labels(f))
    figure, axes = new_figure()
    axis = axes[0, 0]
    for label, group in rows.groupby("series", sort=True):
        quantiles = group.groupby("workers")[c.SELECT_MAX].quantile([0.25, 0.5, 0.75]).unstack()
        color = method_color(base_method(label))
        axis.plot(quantiles.index, quantiles[0.5], "o-", color=color, label=label)
        axis.fill_between(quantiles.index, quantiles[0.25], quantiles[0.75], color=color, alpha=0.2)
    workers_axis(axis, rows["workers"])
    axis.set_yscale("log")
    axis.set_ylabel("selection time per step (ms, slowest rank)")
    return finish(figure, "Selection time vs workers (median, IQR over steps)", [axis], data=rows)


def buildup_density_vs_workers(tables: RunTables) -> Figure | None:
    """Left: mean build-up |U| / selection size against W. Right: mean actual density |U| / N
    against W, with each method's target dashed. Error bars: std over logged steps."""
    steps = tables.steps
    if not (c.has_data(steps, c.BUILDUP) or c.has_data(steps, c.DENSITY_ACTUAL)):
        return None
    rows = steps.assign(series=lambda f: series_labels(f))
    figure, axes = new_figure(1, 2)
    left, right = axes[0]
    for label, group in rows.groupby("series", sort=True):
        color = method_color(base_method(label))
        for axis, column in ((left, c.BUILDUP), (right, c.DENSITY_ACTUAL)):
            if not c.has_data(group, column):
                continue
            spread = group.groupby("workers")[column].agg(["mean", "std"])
            axis.errorbar(spread.index, spread["mean"], yerr=spread["std"].fillna(0), fmt="o-", color=color, capsize=3, label=label)
        if c.has_data(group, c.DENSITY_TARGET):
            target = group.groupby("workers")[c.DENSITY_TARGET].mean()
            right.plot(target.index, target, "--", color=color, alpha=0.7)
    for axis in (left, right):
        workers_axis(axis, rows["workers"])
    left.set_ylabel("build-up (|U| / selection size)")
    right.set_ylabel("actual density |U| / N (dashed: target)")
    right.set_yscale("log")
    return finish(figure, "Gradient build-up and actual density vs workers", [left, right], data=rows)


def compression_error(tables: RunTables) -> Figure | None:
    """Mean |density/error| (|U| / k - 1, the papers' compression ratio error) per method, one
    bar per worker count."""
    steps = tables.steps
    if not c.has_data(steps, c.DENSITY_ERROR):
        return None
    rows = steps.assign(series=lambda f: series_labels(f), abs_error=lambda f: f[c.DENSITY_ERROR].abs())
    table = rows.groupby(["series", "workers"])["abs_error"].mean().unstack("workers")
    figure, axes = new_figure(width=max(5.0, 0.9 * len(table) * max(1, table.shape[1]) / 2))
    axis = axes[0, 0]
    width = 0.8 / max(1, table.shape[1])
    positions = np.arange(len(table))
    for offset, workers in enumerate(table.columns):
        axis.bar(positions + (offset - (table.shape[1] - 1) / 2) * width, table[workers], width, label=f"W={workers}")
    axis.set_xticks(positions, table.index, rotation=30, ha="right")
    axis.set_xlabel("method")
    axis.set_ylabel("mean |density error| (|U| / k - 1)")
    return finish(figure, "Compression ratio error per method", [axis], data=rows)
