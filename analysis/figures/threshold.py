"""Threshold control and partitions: actual density against its target over training, MiCRO's
and ExDyna's load imbalance, and ExDyna's moving partition boundaries."""
from __future__ import annotations

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from analysis import columns as c
from analysis.figures.style import finish, method_color, new_figure, series_labels, stack_lists
from analysis.tables import RunTables
from experiments.runformat.metric_keys import PARTITION_BOUNDARIES
from sparsifiers.registry import chosen

MAX_PANELS = 4


def _worker_colors(workers) -> dict:
    ordered = sorted({int(w) for w in workers})
    cmap = matplotlib.colormaps["viridis"]
    return {w: cmap(i / max(1, len(ordered) - 1) * 0.85) for i, w in enumerate(ordered)}


def _first_seed(steps: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """The rows of each `by` group's first seed: every line gets its run, whichever seeds that
    group was run with (the smallest seed of all runs would drop a group that lacks it)."""
    return steps[steps["seed"] == steps.groupby(by, observed=True)["seed"].transform("min")]


def density_vs_step(tables: RunTables, methods: tuple[str, ...] = c.THRESHOLD_METHODS) -> Figure | None:
    """Actual density per step, one panel per threshold method, one line per worker count
    (first seed), each run's target dashed in its colour (the target moves where the method has
    stages, e.g. DGC's warm-up)."""
    steps = tables.steps[tables.steps["sparsifier"].isin(methods)]
    if not c.has_data(steps, c.DENSITY_ACTUAL):
        return None
    steps = _first_seed(steps, ["method", "workers"])
    names = sorted(steps["method"].astype(str).unique())
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    figure, axes = new_figure(rows, cols)
    colors = _worker_colors(steps["workers"])
    for axis, name in zip(axes.flat, names):
        for (workers, _), run in steps[steps["method"] == name].groupby(["workers", "run_id"], observed=True):
            run = run.sort_values("step")
            color = colors[int(workers)]
            axis.plot(run["step"], run[c.DENSITY_ACTUAL], color=color, label=f"W={workers}")
            if c.has_data(run, c.DENSITY_TARGET):
                axis.plot(run["step"], run[c.DENSITY_TARGET], "--", color=color, alpha=0.8, label="target (dashed)")
        axis.set_yscale("log")
        axis.set_title(name)
        axis.set_xlabel("step")
        axis.set_ylabel("actual density |U| / N")
    for axis in list(axes.flat)[len(names):]:
        axis.set_visible(False)
    return finish(figure, "Actual density vs step, threshold methods", [a for a in axes.flat if a.get_visible()], data=steps)


# The load-imbalance figure's default: ExDyna's moving partitions beside MiCRO's fixed ones.
BALANCED_VS_FIXED = chosen("micro", "exdyna")


def load_imbalance_vs_step(tables: RunTables, methods: tuple[str, ...] = BALANCED_VS_FIXED) -> Figure | None:
    """selection/load_imbalance (W * max_r |S_r| / sum_r |S_r| - 1, the index padding) per step,
    one panel per worker count (the largest few), one line per method (first seed)."""
    steps = tables.steps[tables.steps["sparsifier"].isin(methods)]
    if not c.has_data(steps, c.LOAD_IMBALANCE):
        return None
    steps = _first_seed(steps, ["method", "workers"])
    workers = sorted(steps["workers"].unique())[-MAX_PANELS:]
    figure, axes = new_figure(1, len(workers))
    steps = steps.assign(series=lambda f: series_labels(f))
    for axis, count in zip(axes[0], workers):
        for label, run in steps[steps["workers"] == count].groupby("series", sort=True):
            run = run.sort_values("step")
            axis.plot(run["step"], run[c.LOAD_IMBALANCE], color=method_color(label.split(" ")[0]), label=label)
        axis.set_title(f"W={count}")
        axis.set_xlabel("step")
        axis.set_ylabel("load imbalance (W max|S_r| / sum|S_r| - 1)")
    return finish(figure, "Load imbalance vs step: " + " vs ".join(methods), list(axes[0]), data=steps[steps["workers"].isin(workers)])


def partition_boundaries(tables: RunTables, method: str = "exdyna") -> Figure | None:
    """The interior partition boundaries over training (ExDyna logs block indices, 0 to B), one
    panel per worker count (the largest few, first seed)."""
    steps = tables.steps[tables.steps["sparsifier"] == method]
    column = PARTITION_BOUNDARIES
    if not c.has_data(steps, column):
        return None
    steps = _first_seed(steps, ["workers"]).dropna(subset=[column])
    workers = sorted(steps["workers"].unique())[-MAX_PANELS:]
    figure, axes = new_figure(1, len(workers))
    for axis, count in zip(axes[0], workers):
        run = steps[steps["run_id"] == steps.loc[steps["workers"] == count, "run_id"].iloc[0]].sort_values("step")
        edges = stack_lists(run[column])
        for index in range(1, edges.shape[1] - 1):
            axis.plot(run["step"], edges[:, index], lw=1)
        axis.set_title(f"W={count}")
        axis.set_xlabel("step")
        axis.set_ylabel("partition boundary (block index)")
    return finish(figure, f"{method} partition boundaries over training", list(axes[0]), data=steps[steps["workers"].isin(workers)])
