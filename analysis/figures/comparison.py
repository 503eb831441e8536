"""The quickstart comparison: one bar per method (and worker count) for each headline number,
the figure every sweep ends with (experiments/engine/launcher/callbacks.py)."""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from analysis.figures.style import base_method, finish, method_color, new_figure, series_labels
from analysis.stats import STATS, run_stats
from analysis.tables import RunTables
from analysis.tasks import DEFAULT_METRIC, metric_order
from experiments.runformat.headline import task_metric

# (stat of analysis.stats.run_stats, panel title), after the panel of each task metric present
# (final accuracy, perplexity, HR@10). The numbers are the report's (the headline registry's one
# reduction rule); the y-axis is the registry's column title of the number.
PANELS = (
    ("select_ms_max", "selection time (slowest rank)"),
    ("mb_sent", "traffic (busiest rank)"),
    ("abs_density_error", "compression ratio error"),
    ("buildup", "build-up"),
    ("load_imbalance", "load imbalance"),
)
COLUMNS = 3


def method_comparison(tables: RunTables) -> Figure | None:
    """Panels of bars, one bar per method (per W when several; per model and dataset when
    several): mean over seeds, with the standard deviation as an error bar where there are
    several seeds. The first panel is the final task metric; runs of several tasks get one panel
    per metric, each with the bars of its own runs."""
    stats = run_stats(tables)
    if stats.empty:
        return None
    several_w = stats["workers"].nunique() > 1
    stats = stats.assign(label=series_labels(stats, extra=("workers",) if several_w else ()))
    # Runs that differ in more than their seed never share a bar (the report's rows): the keys
    # that differ are in the label ("topk max_steps=3", the `settings` key column).
    metrics = metric_order(stats["task_metric"]) or [DEFAULT_METRIC]
    panels = [(metric, None, None) for metric in metrics] + [(stat, title, STATS[stat].title) for stat, title in PANELS]
    rows = -(-len(panels) // COLUMNS)
    # Rotated bar labels below each panel: taller panels for longer labels (knob variants, workloads).
    longest = int(stats["label"].str.len().max())
    figure, axes = new_figure(rows, COLUMNS, width=4.2, height=3.2 + 0.06 * max(0, longest - 12))
    for axis, (stat, title, ylabel) in zip(axes.flat, panels):
        if title is None:  # a task metric: the bars of the runs of that task
            spec = task_metric(stat)
            mine = stats[stats["task_metric"] == stat] if len(metrics) > 1 else stats
            _bars(axis, mine.assign(value=spec.plotted(mine["metric"])), "value")
            axis.set_title(f"final {spec.label}", fontsize="medium")
            axis.set_ylabel(spec.axis_label(prefix=""))
            continue
        means = _bars(axis, stats, stat)
        axis.set_title(title, fontsize="medium")
        axis.set_ylabel(ylabel)
        if stat == "select_ms_max" and np.nanmax(means) > 20 * max(np.nanmin(means), 1e-9):
            axis.set_yscale("log")
    for axis in list(axes.flat)[len(panels):]:
        axis.set_visible(False)
    workers = ", ".join(str(w) for w in sorted(stats["workers"].unique()))
    visible = [axis for axis in axes.flat if axis.get_visible()]
    return finish(figure, f"Method comparison (W = {workers})", visible, handles=[], data=stats)


def _bars(axis: Axes, stats: pd.DataFrame, stat: str) -> list[float]:
    """One bar per label of `stats` (dense first): mean of `stat` over its runs, std as error
    bar. Returns the means."""
    grouped = stats.groupby("label", sort=False)
    order = sorted(grouped.groups, key=lambda label: (base_method(label) != "dense", label))
    means = [grouped.get_group(label)[stat].mean() for label in order]
    stds = [grouped.get_group(label)[stat].std() for label in order]
    positions = np.arange(len(order))
    colors = [method_color(base_method(label)) for label in order]
    axis.bar(positions, np.nan_to_num(means), yerr=np.nan_to_num(stds), color=colors, capsize=3)
    axis.set_xticks(positions, order, rotation=45, ha="right", fontsize="small")
    axis.set_xlabel("method")
    return means
