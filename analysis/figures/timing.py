"""Where a step's time goes, per method and worker count: computation, selection, exchange
(measured) and the rest, beside the same step with the exchange taken from the network model."""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from analysis import columns as c
from analysis.figures.style import finish, new_figure, series_labels
from analysis.stats import timing_rows
from analysis.tables import RunTables

PARTS = (("compute", c.COMPUTE_MAX, "tab:blue"), ("select", c.SELECT_MAX, "tab:orange"), ("exchange", c.EXCHANGE, "tab:green"))


def step_time_breakdown(tables: RunTables) -> Figure | None:
    """Stacked medians (post-warm-up steps, slowest rank) of compute, select and measured
    exchange, plus `other` (optimizer, error feedback: step time minus the three). When
    time/exchange_model_ms is logged, a hatched bar beside each shows compute + select +
    modelled exchange."""
    steps = tables.steps
    if not all(c.has_data(steps, column) for _, column, _ in PARTS):
        return None
    rows = steps[timing_rows(steps)].assign(series=lambda f: series_labels(f))
    columns = [column for _, column, _ in PARTS] + [x for x in (c.STEP, c.EXCHANGE_MODEL) if c.has_data(rows, x)]
    medians = rows.groupby(["series", "workers"])[columns].median().sort_index()
    modelled = c.EXCHANGE_MODEL in medians.columns
    rotate = len(medians) > 12
    labels = [f"{series}{' ' if rotate else chr(10)}W={workers}" for series, workers in medians.index]
    figure, axes = new_figure(width=min(14.0, max(5.0, 0.55 * len(labels) * (2 if modelled else 1))), height=4.2)
    axis = axes[0, 0]
    positions = np.arange(len(labels))
    width = 0.4 if modelled else 0.7
    left = positions - width / 2 if modelled else positions
    bottom = np.zeros(len(labels))
    for name, column, color in PARTS:
        axis.bar(left, medians[column], width, bottom=bottom, color=color, label=f"{name} (measured)")
        bottom += medians[column].to_numpy()
    if c.STEP in medians.columns:
        other = np.clip(medians[c.STEP].to_numpy() - bottom, 0, None)
        axis.bar(left, other, width, bottom=bottom, color="tab:gray", label="other")
    if modelled:
        right = positions + width / 2
        base = (medians[c.COMPUTE_MAX] + medians[c.SELECT_MAX]).to_numpy()
        axis.bar(right, medians[c.COMPUTE_MAX], width, color="tab:blue", alpha=0.5, hatch="//")
        axis.bar(right, medians[c.SELECT_MAX], width, bottom=medians[c.COMPUTE_MAX], color="tab:orange", alpha=0.5, hatch="//")
        axis.bar(right, medians[c.EXCHANGE_MODEL], width, bottom=base, color="tab:purple", alpha=0.6, hatch="//",
                 label="exchange (modelled)")
    axis.set_xticks(positions, labels, fontsize="small", rotation=90 if rotate else 0)
    axis.set_xlabel("method and worker count")
    axis.set_ylabel("ms per step (median, slowest rank)")
    title = "Step time breakdown" + (" (left: measured, right: modelled network)" if modelled else " (measured)")
    return finish(figure, title, [axis], data=rows)
