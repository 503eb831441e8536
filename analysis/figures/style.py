"""What every figure shares: a fresh Figure (no pyplot state, so it renders the same in a
script, under Agg, or in a notebook), stable colours per method, series labels, and a title
that says what the runs were (analysis.figures.provenance).
"""
from __future__ import annotations

import zlib
from typing import Iterable

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from analysis.columns import DENSE
from analysis.figures.provenance import figure_title
from analysis.tasks import is_stand_in
from sparsifiers.registry import names

# Fixed order (the registry's), so a method keeps its colour whatever else a figure shows; the
# methods past PALETTE's colours take a hashed one, as unknown labels do.
KNOWN = names(selects=True)
# tab10 with its gray swapped for navy: gray is kept for legend entries that are not methods.
PALETTE = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "navy",
           "tab:olive", "tab:cyan", "darkgoldenrod", "crimson", "teal", "darkorchid")
# Keys that become part of a series label only when they vary in the data shown.
OPTIONAL_KEYS = ("density", "world", "model", "dataset", "settings")  # settings: analysis.settings


def new_figure(rows: int = 1, cols: int = 1, width: float = 5.0, height: float = 3.6) -> tuple[Figure, np.ndarray]:
    """A figure of rows x cols panels of the given size each; axes as a 2-D array."""
    figure = Figure(figsize=(width * cols, height * rows), layout="constrained", dpi=100)
    axes = figure.subplots(rows, cols, squeeze=False)
    return figure, axes


def method_color(label: str) -> tuple[float, ...] | str:
    """dense is black; known methods take PALETTE in a fixed order; variants and unknown
    methods take a tab20 colour chosen by a stable hash of their label."""
    if label == DENSE:
        return "black"
    if label in KNOWN and KNOWN.index(label) < len(PALETTE):
        return PALETTE[KNOWN.index(label)]
    return matplotlib.colormaps["tab20"](zlib.crc32(label.encode()) % 20)


def series_labels(frame: pd.DataFrame, extra: Iterable[str] = ()) -> pd.Series:
    """method, then each optional key that takes several values in `frame`, then `extra`:
    e.g. "topk d=0.01" when densities differ, "topk W=4" with extra=("workers",), "topk
    max_steps=3" when runs differ in other config keys (the report's rows); "(stand-in)"
    last on runs on stand-in data when others trained on the real data."""
    label = frame["method"].astype(str)
    short = {"density": "d", "workers": "W"}
    extra = tuple(extra)
    for key in (*[k for k in OPTIONAL_KEYS if k not in extra], *extra):
        if key in frame.columns and (key in extra or _varies(frame, key)):
            text = frame[key].astype(str)
            label = label + (f" {short[key]}=" + text if key in short else " " + text)
    if "data_source" in frame.columns and frame["data_source"].nunique() > 1:
        # runs on stand-in data never share a line or bar with runs on the real data
        label = label + frame["data_source"].map(lambda source: " (stand-in)" if is_stand_in(source) else "").astype(str)
    return label


def _varies(frame: pd.DataFrame, key: str) -> bool:
    """Several values of `key`, not counting dense's density (always 1, never a sweep axis)."""
    values = frame.loc[frame["sparsifier"].astype(str) != DENSE, key] if key == "density" else frame[key]
    return values.nunique(dropna=True) > 1


def base_method(label: str) -> str:
    """The method part of a series label ("topk d=0.01" -> "topk")."""
    return label.split(" ")[0]


def workers_axis(axis: Axes, workers: Iterable[int]) -> None:
    """A log2 worker axis labelled with the worker counts that occur."""
    ticks = sorted({int(w) for w in workers})
    axis.set_xscale("log", base=2)
    axis.set_xticks(ticks, [str(t) for t in ticks])
    axis.minorticks_off()
    axis.set_xlabel("workers W")


def finish(figure: Figure, title: str, axes: Iterable[Axes], handles: list[Artist] | None = None, *,
           data: pd.DataFrame | None) -> Figure:
    """Title, light grid, and one legend: inside a lone panel when it is short, else below the
    panels, shared by all of them (entries deduplicated by label). `handles` replaces the
    entries drawn from the panels (e.g. proxies: colour = method, line style = W).

    `data`: the rows the figure drew (any table with the key columns). The title names the
    model and dataset they share and warns when any of them trained on stand-in data."""
    figure.suptitle(figure_title(title, data, width=int(figure.get_figwidth() * 10)))
    axes = list(axes)
    for axis in axes:
        axis.grid(True, alpha=0.3)
    if handles is None:
        found: dict[str, Artist] = {}
        for axis in axes:
            for handle, label in zip(*axis.get_legend_handles_labels()):
                found.setdefault(label, handle)
        handles = [handle for label, handle in found.items() if not label.startswith("_")]
    if not handles:
        return figure
    if len(axes) == 1 and len(handles) <= 6:
        axes[0].legend(handles=handles, fontsize="small")
    else:
        # An entry is its line sample plus its text: long labels (knob variants) take fewer columns.
        longest = max(len(str(handle.get_label())) for handle in handles)
        columns = max(1, min(len(handles), int(figure.get_figwidth() / max(1.4, 0.6 + 0.07 * longest))))
        figure.set_figheight(figure.get_figheight() + 0.25 * -(-len(handles) // columns))
        figure.legend(handles=handles, loc="outside lower center", ncols=columns, fontsize="small")
    return figure


def method_worker_handles(labels: Iterable[str], worker_counts: list[int], styles: tuple[str, ...]) -> list[Artist]:
    """Legend proxies for lines coloured by method and styled by worker count: one entry per
    method, one per worker count, instead of one per (method, W) pair."""
    handles: list[Artist] = [Line2D([], [], color=method_color(base_method(label)), label=label) for label in sorted(set(labels))]
    handles += [Line2D([], [], color="gray", linestyle=styles[i % len(styles)], label=f"W={w}") for i, w in enumerate(worker_counts)]
    return handles


def has_artists(figure: Figure) -> bool:
    """True when some panel draws data (lines, collections, patches or images)."""
    return any(axis.lines or axis.collections or axis.patches or axis.images for axis in figure.axes)


def stack_lists(cells: pd.Series) -> np.ndarray:
    """List-valued cells (one list per step) -> a 2-D array, padded with NaN where shorter."""
    rows = [np.asarray(cell, dtype=float) for cell in cells]
    width = max((len(row) for row in rows), default=0)
    return np.array([np.pad(row, (0, width - len(row)), constant_values=np.nan) for row in rows]).reshape(len(rows), width)
