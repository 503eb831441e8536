"""Wall-clock position of each evaluation, from the per-step times of the logged train rows.

Only every log_every-th step is logged, so each logged step's time stands for the steps up to
the next logged one. Two clocks:
  measured  time/step_ms as the run measured it;
  modelled  time/compute_ms_max + time/select_ms_max + time/exchange_model_ms, i.e. the
            measured computation with the exchange replaced by the alpha-beta network model.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import columns as c

CLOCKS = ("measured", "modelled")


def per_step_ms(steps: pd.DataFrame, clock: str) -> pd.Series | None:
    """Milliseconds per step on `clock` for every logged row; None if the columns are absent."""
    if clock == "measured":
        return steps[c.STEP] if c.has_data(steps, c.STEP) else None
    if clock == "modelled":
        needed = (c.COMPUTE_MAX, c.SELECT_MAX, c.EXCHANGE_MODEL)
        if not all(c.has_data(steps, name) for name in needed):
            return None
        return steps[c.COMPUTE_MAX] + steps[c.SELECT_MAX] + steps[c.EXCHANGE_MODEL]
    raise ValueError(f"clock must be one of {CLOCKS}, got {clock!r}")


def elapsed_at_evals(steps: pd.DataFrame, epochs: pd.DataFrame, clock: str = "measured") -> pd.Series:
    """Seconds of training before each row of `epochs` (index aligned with it; NaN where the run
    logged no time)."""
    result = pd.Series(np.nan, index=epochs.index, dtype=float)
    milliseconds = per_step_ms(steps, clock)
    if milliseconds is None or epochs.empty:
        return result
    timed = steps[["run_id", "step"]].assign(ms=milliseconds).dropna()
    evals_by_run = epochs.groupby("run_id", observed=True)
    for run_id, run in timed.groupby("run_id", observed=True):
        if run_id not in evals_by_run.groups:
            continue
        run = run.sort_values("step")
        logged, ms = run["step"].to_numpy(), run["ms"].to_numpy()
        # Each logged value covers its step and the unlogged steps after it.
        before = np.concatenate([[0.0], np.cumsum(ms[:-1] * np.diff(logged))])
        evals = epochs.loc[evals_by_run.groups[run_id], "step"].to_numpy()
        which = np.clip(np.searchsorted(logged, evals, side="right") - 1, 0, len(logged) - 1)
        done = before[which] + ms[which] * (evals - logged[which] + 1)
        result.loc[evals_by_run.groups[run_id]] = done / 1000.0
    return result
