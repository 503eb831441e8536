"""The figures of method state (threshold methods' density, MiCRO's and ExDyna's load imbalance
and partitions, DEFT's plan, the DGC ablation) checked for what they plot, as
tests/analysis/test_figure_data.py checks the study-wide ones: each figure's artists read back
and compared with its docstring's numbers recomputed from the run folders' own files."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.load import load_runs
from analysis.synthetic import SyntheticRun, write_run
from analysis.tables import RunTables
from experiments.runformat import metric_keys as k
from tests.helpers import axes_data as ax
from tests.helpers.figure_checks import BLACK, THRESHOLD, WORKERS, close, draw, first_seed, panel
from tests.helpers.raw_runs import RawStudy, read_study


def test_density_vs_step(synthetic_tables: RunTables, synthetic_study: RawStudy) -> None:
    """One panel per threshold method, one line per W (first seed) and its target dashed."""
    figure = draw("density_vs_step", synthetic_tables)
    assert [axis.get_title() for axis in ax.visible_axes(figure)] == THRESHOLD
    for method in THRESHOLD:
        lines = ax.lines(panel(figure, method))
        solid = {int(line.label[2:]): line for line in lines if line.style == "-"}
        dashed = {line.color: line for line in lines if line.style == "--"}
        assert sorted(solid) == WORKERS and len(dashed) == len(WORKERS)
        for workers, line in solid.items():
            run = first_seed(synthetic_study, method, workers)
            close(line.x, run[k.ROW_STEP])
            close(line.y, run[k.DENSITY_ACTUAL])
            close(dashed[line.color].y, run[k.DENSITY_TARGET])


def test_load_imbalance_vs_step(synthetic_tables: RunTables, synthetic_study: RawStudy) -> None:
    """One panel per W, MiCRO's and ExDyna's load imbalance per step (first seed)."""
    figure = draw("load_imbalance_vs_step", synthetic_tables)
    assert [axis.get_title() for axis in figure.axes] == [f"W={w}" for w in WORKERS]
    for axis, workers in zip(figure.axes, WORKERS):
        lines = ax.lines(axis)
        assert sorted(line.label for line in lines) == ["exdyna", "micro"]
        for line in lines:
            run = first_seed(synthetic_study, line.label, workers)
            close(line.x, run[k.ROW_STEP])
            close(line.y, run[k.LOAD_IMBALANCE])


def test_partition_boundaries(synthetic_tables: RunTables, synthetic_study: RawStudy) -> None:
    """One panel per W: ExDyna's W - 1 interior boundaries per step (first seed)."""
    figure = draw("partition_boundaries", synthetic_tables)
    assert [axis.get_title() for axis in figure.axes] == [f"W={w}" for w in WORKERS]
    for axis, workers in zip(figure.axes, WORKERS):
        run = first_seed(synthetic_study, "exdyna", workers)
        edges = np.array(run[k.PARTITION_BOUNDARIES].tolist())
        lines = ax.lines(axis)
        assert len(lines) == workers - 1
        for index, line in enumerate(lines, start=1):
            close(line.x, run[k.ROW_STEP])
            close(line.y, edges[:, index])


def test_deft_units(synthetic_tables: RunTables, synthetic_study: RawStudy) -> None:
    """The DEFT run with the most workers (first seed): its last logged unit norms and k per
    unit as bars, each bin's load per step as a line."""
    figure = draw("deft_units", synthetic_tables)
    run = first_seed(synthetic_study, "deft", max(WORKERS))
    last = run.iloc[-1]
    assert f"W={max(WORKERS)}" in figure.get_suptitle()
    norms_axis, k_axis, loads_axis = figure.axes
    for axis, column in ((norms_axis, k.DEFT_UNIT_NORMS), (k_axis, k.DEFT_UNIT_K)):
        bars = ax.bars(axis)
        close([bar.x for bar in bars], range(len(last[column])))
        close([bar.height for bar in bars], last[column])
        assert axis.get_xlabel().endswith(f"step {int(last[k.ROW_STEP])}")
    loads = np.array(run[k.DEFT_BIN_LOADS].tolist())
    lines = ax.lines(loads_axis)
    assert [line.label for line in lines] == [f"bin {i}" for i in range(max(WORKERS))]
    for index, line in enumerate(lines):
        close(line.x, run[k.ROW_STEP])
        close(line.y, loads[:, index])


def test_dgc_ablation(workloads: Path) -> None:
    """One curve per knob variant (mean over its seeds) and dense in black: train loss as the
    mean over each epoch's logged steps, accuracy (%) at each epoch's evaluation."""
    figure = draw("dgc_ablation", load_runs([workloads / "ablation", workloads / "cifar10"]))
    synthetic_study = read_study(workloads / "ablation", workloads / "cifar10")
    shown = synthetic_study.runs[synthetic_study.runs["method"].isin(["dgc", "dense"])]
    labels = pd.Series(
        [f"momentum={m}, warmup={str(w).lower()}" if method == "dgc" else "dense"
         for method, m, w in zip(shown["method"], shown["knob.momentum"], shown["knob.warmup"])], index=shown["run"])
    train = synthetic_study.train[synthetic_study.train["run"].isin(labels.index)]
    loss = train.groupby(["run", k.ROW_EPOCH])[k.LOSS].mean().rename("value").reset_index()
    evals = synthetic_study.evals[synthetic_study.evals["run"].isin(labels.index)].assign(value=lambda f: f[k.ACCURACY] * 100)
    loss_axis, metric_axis = figure.axes
    for axis, rows in ((loss_axis, loss), (metric_axis, evals)):
        curves = rows.assign(label=rows["run"].map(labels)).groupby(["label", k.ROW_EPOCH])["value"].mean()
        lines = ax.lines(axis)
        assert sorted(line.label for line in lines) == sorted(set(labels)) == sorted(ax.legend_labels(figure))
        for line in lines:
            close(line.x, curves.loc[line.label].index)
            close(line.y, curves.loc[line.label])
            assert (line.color == BLACK) == (line.label == "dense")


def test_first_seed_is_each_lines_own(tmp_path: Path) -> None:
    """"First seed" is per line: runs whose seeds differ by method and W each keep their line and
    panel, drawn from their own smallest seed (not the smallest seed of all runs)."""
    seeds = {("micro", 2): [1], ("micro", 4): [0, 1], ("exdyna", 2): [0], ("exdyna", 4): [2, 3]}
    for (method, workers), numbers in seeds.items():
        for seed in numbers:
            write_run(tmp_path / f"{method}_w{workers}_s{seed}", SyntheticRun(method, workers, seed=seed, steps=8, epochs=1))
    synthetic_tables, synthetic_study = load_runs(tmp_path), read_study(tmp_path)
    imbalance = draw("load_imbalance_vs_step", synthetic_tables)
    assert [axis.get_title() for axis in imbalance.axes] == ["W=2", "W=4"]
    for axis, workers in zip(imbalance.axes, (2, 4)):
        lines = ax.lines(axis)
        assert sorted(line.label for line in lines) == ["exdyna", "micro"]
        for line in lines:
            close(line.y, first_seed(synthetic_study, line.label, workers)[k.LOAD_IMBALANCE])
    for line in ax.lines(panel(draw("density_vs_step", synthetic_tables), "micro")):
        if line.style == "-":
            close(line.y, first_seed(synthetic_study, "micro", int(line.label[2:]))[k.DENSITY_ACTUAL])
    boundaries = draw("partition_boundaries", synthetic_tables)
    assert [axis.get_title() for axis in boundaries.axes] == ["W=2", "W=4"]
    edges = np.array(first_seed(synthetic_study, "exdyna", 4)[k.PARTITION_BOUNDARIES].tolist())
    close(np.array([line.y for line in ax.lines(boundaries.axes[1])]).T, edges[:, 1:-1])
