"""Markdown tables without extra dependencies (pandas' to_markdown needs tabulate)."""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import pandas as pd


def table(frame: pd.DataFrame, formats: dict[str, Callable[[Any], str]] | None = None) -> str:
    """`frame` as a GitHub markdown table; `formats` maps a column to its cell formatter."""
    formats = formats or {}
    header = [str(column) for column in frame.columns]
    rows = [[_cell(row[column], formats.get(column)) for column in frame.columns] for _, row in frame.iterrows()]
    return "\n".join(_line(cells) for cells in [header, ["---"] * len(header), *rows])


def _cell(value: Any, formatter: Callable[[Any], str] | None) -> str:
    if formatter is not None:
        return formatter(value)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return str(value)


def _line(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|").replace("\n", " ") for cell in cells) + " |"


def mean_std(fmt: str) -> Callable[[tuple[float, float]], str]:
    """Formats (mean, std) as "m ± s", or "m" alone when std is NaN (one seed)."""
    def format_pair(pair: tuple[float, float]) -> str:
        mean, std = pair
        if mean is None or (isinstance(mean, float) and math.isnan(mean)):
            return "-"
        if std is None or (isinstance(std, float) and math.isnan(std)):
            return fmt.format(mean)
        return f"{fmt.format(mean)} ± {fmt.format(std)}"
    return format_pair
