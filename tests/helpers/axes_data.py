"""What a drawn matplotlib figure shows, read back from its artists: line data, bar rectangles,
error-bar sizes, fill_between bands, tick and legend labels. The figure-data tests compare these
with numbers recomputed from the run folders (tests/helpers/raw_runs.py), so a figure is
checked for what it plots, not only for having drawn something."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgba
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle


@dataclass(frozen=True)
class Line:
    """One data line: its label, colour (RGBA), line style, width and points."""

    label: str
    color: tuple[float, ...]
    style: str
    width: float
    x: np.ndarray
    y: np.ndarray


@dataclass(frozen=True)
class Bar:
    """One bar: centre x, bottom, height, colour (RGBA) and hatch."""

    x: float
    bottom: float
    height: float
    color: tuple[float, ...]
    hatch: str | None


@dataclass(frozen=True)
class ErrorBars:
    """One errorbar() call: its label, colour, points and the half-length of each bar."""

    label: str
    color: tuple[float, ...]
    x: np.ndarray
    y: np.ndarray
    err: np.ndarray


def _line(artist: Line2D) -> Line:
    xy = np.asarray(artist.get_xydata(), dtype=float).reshape(-1, 2)
    return Line(str(artist.get_label()), to_rgba(artist.get_color()), str(artist.get_linestyle()), float(artist.get_linewidth()),
                xy[:, 0], xy[:, 1])


def lines(axis: Axes) -> list[Line]:
    """The axis's data lines in drawing order; error bars' caps and data lines are left out
    (errorbars() reads those)."""
    owned = set()
    for container in axis.containers:
        if isinstance(container, ErrorbarContainer):
            data_line, caps, _ = container.lines
            owned.update(id(artist) for artist in (data_line, *caps) if artist is not None)
    return [_line(artist) for artist in axis.lines if id(artist) not in owned]


def errorbars(axis: Axes) -> list[ErrorBars]:
    """Each errorbar() call of the axis: the points of its line and each point's error (half the
    length of its vertical bar, 0 where no bar was drawn)."""
    found = []
    for container in axis.containers:
        if not isinstance(container, ErrorbarContainer):
            continue
        data_line, _, bar_collections = container.lines
        segments = [segment for collection in bar_collections for segment in collection.get_segments()]
        if data_line is None:  # bar(yerr=...): no line, the bars' centres are the points
            middles = np.array([[(a[0] + b[0]) / 2, (a[1] + b[1]) / 2] for a, b in segments]).reshape(-1, 2)
            line = Line(str(container.get_label()), (0.0, 0.0, 0.0, 0.0), "None", 0.0, middles[:, 0], middles[:, 1])
        else:
            line = _line(data_line)
        err = np.zeros(len(line.x))
        for (x0, y0), (_, y1) in segments:
            err[int(np.argmin(np.abs(line.x - x0)))] = abs(y1 - y0) / 2
        found.append(ErrorBars(str(container.get_label()), line.color, line.x, line.y, err))
    return found


def bars(axis: Axes) -> list[Bar]:
    """Every bar of every bar() call, in drawing order."""
    found = []
    for container in axis.containers:
        if not isinstance(container, BarContainer):
            continue
        for patch in container.patches:
            found.append(_bar(patch))
    return found


def bar_groups(axis: Axes) -> list[tuple[str, list[Bar]]]:
    """(label, bars) per bar() call, in drawing order."""
    return [(str(container.get_label()), [_bar(patch) for patch in container.patches])
            for container in axis.containers if isinstance(container, BarContainer)]


def _bar(patch: Rectangle) -> Bar:
    return Bar(patch.get_x() + patch.get_width() / 2, patch.get_y(), patch.get_height(), to_rgba(patch.get_facecolor()),
               patch.get_hatch())


def bands(axis: Axes) -> list[tuple[tuple[float, ...], dict[float, tuple[float, float]]]]:
    """Each fill_between band of the axis, in drawing order: its face colour (RGBA) and
    {x: (lower, upper)} at each x its polygon passes."""
    found = []
    for collection in axis.collections:
        if not isinstance(collection, PolyCollection):
            continue
        color = tuple(float(v) for v in collection.get_facecolor()[0])
        for path in collection.get_paths():
            band: dict[float, list[float]] = {}
            for x, y in path.vertices:
                band.setdefault(float(x), []).append(float(y))
            found.append((color, {x: (min(ys), max(ys)) for x, ys in band.items()}))
    return found


def tick_labels(axis: Axes) -> list[str]:
    """The x tick labels as drawn, left to right."""
    return [label.get_text() for label in axis.get_xticklabels()]


def tick_positions(axis: Axes) -> list[float]:
    return [float(tick) for tick in axis.get_xticks()]


def legend_entries(figure: Figure) -> list[tuple[str, Line2D | object]]:
    """(text, handle) of every legend of the figure (figure legends, then each axis's)."""
    legends = list(figure.legends) + [axis.get_legend() for axis in figure.axes if axis.get_legend()]
    return [(text.get_text(), handle) for legend in legends for text, handle in zip(legend.get_texts(), legend.legend_handles)]


def legend_labels(figure: Figure) -> list[str]:
    return [text for text, _ in legend_entries(figure)]


def visible_axes(figure: Figure) -> list[Axes]:
    return [axis for axis in figure.axes if axis.get_visible()]
