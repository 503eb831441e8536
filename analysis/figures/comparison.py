"""The quickstart comparison: one bar per method (and worker count) for each headline number,
the figure every sweep ends with (experiments/callbacks.py)."""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from analysis.figures.style import base_method, finish, method_color, new_figure
from analysis.stats import run_stats
from analysis.tables import RunTables

# (stat of analysis.stats.run_stats, panel title, y-axis label with units)
PANELS = (
    ("accuracy", "final accuracy", "accuracy (fraction)"),
    ("select_ms_max", "selection time (slowest rank)", "ms per step"),
    ("mb_sent", "traffic (busiest rank)", "MB sent per step"),
    ("abs_density_error", "compression ratio error", "mean |density error|"),
    ("buildup", "build-up", "|U| / selection size"),
    ("load_imbalance", "load imbalance", "W max|S_r| / sum|S_r| - 1"),
)


def method_comparison(tables: RunTables) -> Figure | None:
    """Six panels of bars, one bar per method (per W when several): mean over seeds, with the
    standard deviation as an error bar where there are several seeds."""
    stats = run_stats(tables)
    if stats.empty:
        return None
    several_w = stats["workers"].nunique() > 1
    stats = stats.assign(label=stats["method"].astype(str) + (" W=" + stats["workers"].astype(str) if several_w else ""))
    grouped = stats.groupby("label", sort=False)
    order = sorted(grouped.groups, key=lambda label: (base_method(label) != "dense", label))
    figure, axes = new_figure(2, 3, width=4.2, height=3.2)
    for axis, (stat, title, ylabel) in zip(axes.flat, PANELS):
        means = [grouped.get_group(label)[stat].mean() for label in order]
        stds = [grouped.get_group(label)[stat].std() for label in order]
        positions = np.arange(len(order))
        colors = [method_color(base_method(label)) for label in order]
        axis.bar(positions, np.nan_to_num(means), yerr=np.nan_to_num(stds), color=colors, capsize=3)
        axis.set_xticks(positions, order, rotation=45, ha="right", fontsize="small")
        axis.set_title(title, fontsize="medium")
        axis.set_xlabel("method")
        axis.set_ylabel(ylabel)
        if stat == "select_ms_max" and np.nanmax(means) > 20 * max(np.nanmin(means), 1e-9):
            axis.set_yscale("log")
    workers = ", ".join(str(w) for w in sorted(stats["workers"].unique()))
    return finish(figure, f"Method comparison (W = {workers})", list(axes.flat), handles=[])
