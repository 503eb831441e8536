"""DEFT's plan, from the per-unit lists it logs every log_units_every steps: gradient norm and
k per unit at the last logged plan, and the bin loads (one bin per worker) over training."""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from analysis.columns import has_data
from analysis.figures.style import finish, new_figure, stack_lists
from analysis.tables import RunTables
from experiments.runformat.metric_keys import DEFT_BIN_LOADS, DEFT_UNIT_K, DEFT_UNIT_NORMS


def deft_units(tables: RunTables, method: str = "deft") -> Figure | None:
    """Three panels for the DEFT run with the most workers (first seed): per-unit gradient norm
    and per-unit k at the last step that logged them, and each bin's load over training."""
    steps = tables.steps[tables.steps["sparsifier"] == method]
    found = {name: key if has_data(steps, key) else None for name, key in
             (("norms", DEFT_UNIT_NORMS), ("k", DEFT_UNIT_K), ("loads", DEFT_BIN_LOADS))}
    if not any(found.values()):
        return None
    present = [column for column in found.values() if column]
    steps = steps.dropna(subset=present, how="all")
    run_id = steps.sort_values(["workers", "seed"], ascending=[False, True])["run_id"].iloc[0]
    run = steps[steps["run_id"] == run_id].sort_values("step")
    workers = int(run["workers"].iloc[0])
    figure, axes = new_figure(1, 3)
    for axis, name, ylabel in ((axes[0, 0], "norms", "||acc|| of the unit"), (axes[0, 1], "k", "k of the unit")):
        column = found[name]
        if column is None:
            axis.set_visible(False)
            continue
        last = run.dropna(subset=[column]).iloc[-1]
        values = np.asarray(last[column], dtype=float)
        axis.bar(np.arange(len(values)), values, color="tab:blue" if name == "norms" else "tab:orange")
        axis.set_xlabel(f"unit (parameter order), step {int(last['step'])}")
        axis.set_ylabel(ylabel)
    loads_axis = axes[0, 2]
    if found["loads"] is None:
        loads_axis.set_visible(False)
    else:
        rows = run.dropna(subset=[found["loads"]])
        loads = stack_lists(rows[found["loads"]])
        for index in range(loads.shape[1]):
            loads_axis.plot(rows["step"], loads[:, index], "o-", markersize=3, label=f"bin {index}")
        loads_axis.set_xlabel("step")
        loads_axis.set_ylabel("bin load (sum of unit costs)")
    visible = [axis for axis in axes[0] if axis.get_visible()]
    return finish(figure, f"DEFT plan (W={workers}): unit norms, k per unit, bin loads per worker", visible, data=run)
