"""Names the analysis relies on, in one place: the metric contract of DESIGN.md ("Metrics") and
the config columns every table carries.

Method-specific state (partition boundaries, DEFT's per-unit lists) is looked up through a
tuple of accepted names, so that a sparsifier logging under a slightly different key still
plots; the first name of each tuple is the one new code should use.
"""
from __future__ import annotations

from typing import Iterable

import pandas as pd

# Config columns joined onto every table (the runs table also holds the whole flattened config).
KEYS = (
    "run_id", "method", "sparsifier", "density", "workers", "processes", "world",
    "model", "dataset", "task_metric", "data_source", "seed", "group", "status", "run_dir",
)
NUMERIC_KEYS = ("density", "workers", "processes", "seed")

# Train-row metrics.
SELECT_MAX = "time/select_ms_max"
SELECT_MEAN = "time/select_ms_mean"
COMPUTE_MAX = "time/compute_ms_max"
EXCHANGE = "time/exchange_ms"
EXCHANGE_MODEL = "time/exchange_model_ms"
STEP = "time/step_ms"
SENT_MAX = "traffic/sent_bytes_max"
RATIO = "traffic/ratio"
DENSITY_ACTUAL = "density/actual"
DENSITY_TARGET = "density/target"
DENSITY_ERROR = "density/error"
BUILDUP = "buildup"
LOAD_IMBALANCE = "selection/load_imbalance"
RESIDUAL = "ef/residual_norm"
REL_RESIDUAL = "ef/rel_residual"
LOSS = "train/loss"

# Eval-row metrics. Each run's headline metric is its own (`task_metric`, analysis.tasks);
# accuracy is the classification runs' one.
ACCURACY = "eval/accuracy"

# Method state.
THRESHOLD = ("sparsifier/threshold",)
BOUNDARIES = ("sparsifier/partition_boundaries", "sparsifier/boundaries")
UNIT_NORMS = ("sparsifier/unit_norms", "sparsifier/unit_norm", "deft/unit_norms")
UNIT_K = ("sparsifier/unit_k", "sparsifier/k_per_unit", "deft/unit_k")
BIN_LOADS = ("sparsifier/bin_loads", "sparsifier/bin_load", "deft/bin_loads")

# Methods whose density is set by a threshold rather than by a count.
THRESHOLD_METHODS = ("micro", "exdyna", "sage", "threshold", "dgc")
DENSE = "dense"


def first_present(frame: pd.DataFrame, names: Iterable[str]) -> str | None:
    """The first of `names` that is a column of `frame` with at least one value, else None."""
    for name in names:
        if name in frame.columns and frame[name].notna().any():
            return name
    return None


def has_data(frame: pd.DataFrame, name: str) -> bool:
    """True when `name` is a column of `frame` holding at least one value."""
    return name in frame.columns and bool(frame[name].notna().any())
