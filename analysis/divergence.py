"""Which runs diverged, read from their directories: summary.json's `diverged` where the run
recorded it, else the same rule (experiments/runformat/divergence.py) applied to what it logged
(runs made before summary.json recorded it, and runs that never wrote a summary). Such a run's
numbers are no result: the report lists it instead of averaging it; its method's convergence
claims fail on it, and the other claims leave it out and say so (analysis/claims/judge.py)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.stats import logged_order
from analysis.tables import RunTables
from experiments.runformat import metric_keys as keys
from experiments.runformat.divergence import describe, diverged

RECORDED = "diverged"  # the runs-table column analysis.runinfo fills from summary.json (None: not recorded)


def diverged_reasons(tables: RunTables) -> pd.Series:
    """Per run_id: "diverged at step S: why", or "" for a run that did not diverge."""
    runs = tables.runs
    recorded = runs[RECORDED] if RECORDED in runs.columns else pd.Series(None, index=runs.index, dtype=object)
    order = logged_order(tables.steps)
    losses = pd.to_numeric(tables.steps[keys.LOSS], errors="coerce").to_numpy(dtype=float) \
        if keys.LOSS in tables.steps.columns else None
    steps = tables.steps["step"].to_numpy() if "step" in tables.steps.columns else None
    reasons = {}
    for run_id, written in zip(runs["run_id"], recorded):
        if isinstance(written, str):
            reasons[run_id] = written
            continue
        rows = order.get(run_id)
        series = [] if rows is None or losses is None else list(zip(steps[rows], losses[rows]))
        # Old runs recorded no class count: the loss rule only.
        reasons[run_id] = describe(diverged([(s, v) for s, v in series if np.isfinite(v)]))
    return pd.Series(reasons, dtype=object).reindex(runs["run_id"]).fillna("")
