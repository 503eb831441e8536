"""Method labels: the sparsifier's name, plus the knobs that tell its runs apart.

A sweep over `sparsifier.exchange=union_allreduce,sparse_allgather` gives two Top-k methods;
labelling both "topk" would average them together, so each gets "topk(exchange=...)". Knobs that
every run of a sparsifier shares, and the density (a column of its own), stay out of the label.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

PREFIX = "cfg.sparsifier."
_NOT_KNOBS = {"name", "density"}


def varying_knobs(rows: pd.DataFrame, exclude: set[str] = _NOT_KNOBS) -> list[str]:
    """The `cfg.sparsifier.*` columns that take several values among `rows` (runs-table rows),
    other than `exclude` (knob names without the prefix)."""
    knobs = [c for c in rows.columns if c.startswith(PREFIX) and c[len(PREFIX):] not in exclude]
    return varying_columns(rows, knobs)


def varying_columns(rows: pd.DataFrame, columns: list[str]) -> list[str]:
    """Those of `columns` that take several values among `rows`, compared as the config writes
    them (a missing value is `null`, a value of its own)."""
    return [c for c in columns if c in rows.columns and rows[c].map(format_knob).nunique(dropna=False) > 1]


def format_knob(value: object) -> str:
    """A knob's value as the config writes it: null, true/false, numbers and text as they are."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "null"
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value)).lower()
    return str(value)


def knob_text(row: pd.Series, columns: list[str], separator: str = ",") -> str:
    """"momentum=0.9,warmup=false" for the knob `columns` of one runs-table row."""
    return separator.join(f"{c[len(PREFIX):]}={format_knob(row[c])}" for c in columns)


def method_labels(runs: pd.DataFrame) -> pd.Series:
    """One label per row of the runs table."""
    labels = runs["sparsifier"].fillna("?").astype(str).copy()
    for name, rows in runs.groupby(labels, sort=False):
        varying = varying_knobs(rows)
        if not varying:
            continue
        for index, row in rows.iterrows():
            labels.loc[index] = f"{name}({knob_text(row, varying)})"
    return labels
