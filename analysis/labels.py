"""Method labels: the sparsifier's name, plus the knobs that tell its runs apart.

A sweep over `sparsifier.exchange=union_allreduce,sparse_allgather` gives two Top-k methods;
labelling both "topk" would average them together, so each gets "topk(exchange=...)". Knobs that
every run of a sparsifier shares, and the density (a column of its own), stay out of the label.
"""
from __future__ import annotations

import pandas as pd

_PREFIX = "cfg.sparsifier."
_NOT_KNOBS = {"name", "density"}


def method_labels(runs: pd.DataFrame) -> pd.Series:
    """One label per row of the runs table."""
    labels = runs["sparsifier"].fillna("?").astype(str).copy()
    knobs = [c for c in runs.columns if c.startswith(_PREFIX) and c[len(_PREFIX):] not in _NOT_KNOBS]
    for name, rows in runs.groupby(labels, sort=False):
        varying = [c for c in knobs if rows[c].astype(str).nunique(dropna=False) > 1]
        if not varying:
            continue
        for index, row in rows.iterrows():
            knob_text = ",".join(f"{c[len(_PREFIX):]}={row[c]}" for c in varying)
            labels.loc[index] = f"{name}({knob_text})"
    return labels
