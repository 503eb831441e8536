"""Names the analysis relies on, in one place: the config columns every table carries, and the
metric keys (docs/metrics.md) the analysis reads, which are experiments/runformat/metric_keys.py's:
one key per fact, the one the runner logs (method state included, e.g. DEFT's `deft/unit_norms`).
"""
from __future__ import annotations

import pandas as pd

from sparsifiers.registry import names

# The metric keys the analysis modules read as `columns.<NAME>`; their one definition is there.
from experiments.runformat.metric_keys import (  # noqa: F401
    ACCURACY, BUILDUP, COMPUTE_MAX, DENSITY_ACTUAL, DENSITY_ERROR, DENSITY_TARGET, EXCHANGE, EXCHANGE_MODEL,
    LOAD_IMBALANCE, LOSS, RATIO, REL_RESIDUAL, RESIDUAL, SELECT_MAX, SELECT_MEAN, SENT_MAX, STEP,
)

# Config columns joined onto every table (the runs table also holds the whole flattened config).
KEYS = (
    "run_id", "method", "sparsifier", "density", "workers", "processes", "world",
    "model", "dataset", "task_metric", "data_source", "seed", "group", "status", "run_dir",
    "settings",  # the config keys that tell this run apart from the others loaded (analysis.settings)
)
NUMERIC_KEYS = ("density", "workers", "processes", "seed")

# Methods whose density is set by a threshold rather than by a count.
THRESHOLD_METHODS = names(thresholded=True)
DENSE = "dense"


def has_data(frame: pd.DataFrame, name: str) -> bool:
    """True when `name` is a column of `frame` holding at least one value."""
    return name in frame.columns and bool(frame[name].notna().any())
