"""Every figure function: real data where the tiny sweep has it, synthetic data for the
method-specific ones (the DGC ablation: a synthetic sweep of DGC's knobs); each returns None
without data, or a Figure that draws and saves as PNG."""
from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.figure import Figure

from analysis.figures import FIGURES
from analysis.load import load_runs
from analysis.tables import RunTables

PNG = b"\x89PNG\r\n\x1a\n"
# What the dense/topk sweep can draw; the rest need threshold, partition or DEFT methods.
REAL = {"method_comparison", "selection_time_vs_workers", "buildup_density_vs_workers", "compression_error", "step_time_breakdown",
        "task_metric_curves", "residual_norm"}


def check_drawn(figure: Figure, path: Path) -> None:
    """Every visible panel holds data, and the figure saves as a PNG."""
    panels = [axis for axis in figure.axes if axis.get_visible()]
    assert panels
    for axis in panels:
        assert axis.lines or axis.collections or axis.patches or axis.images, axis.get_title()
        assert axis.get_xlabel() and axis.get_ylabel()
    assert figure.get_suptitle()
    figure.savefig(path)
    assert path.read_bytes().startswith(PNG)


@pytest.fixture(scope="module")
def real(sweep: Path) -> RunTables:
    return load_runs(sweep)


@pytest.fixture(scope="module")
def every_method(synthetic: Path) -> RunTables:
    return load_runs(synthetic / "sweep")


@pytest.fixture(scope="module")
def dgc_sweep(workloads: Path) -> RunTables:
    return load_runs([workloads / "ablation", workloads / "cifar10"])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FIGURES))
def test_figures_of_the_real_sweep(name: str, real: RunTables, tmp_path: Path) -> None:
    figure = FIGURES[name][0](real)
    if name in REAL:
        check_drawn(figure, tmp_path / f"{name}.png")
    else:
        assert figure is None


@pytest.mark.parametrize("name", list(FIGURES))
def test_figures_of_every_method(name: str, every_method: RunTables, dgc_sweep: RunTables, tmp_path: Path) -> None:
    tables = dgc_sweep if name == "dgc_ablation" else every_method  # the sweep's dgc runs share their knobs
    check_drawn(FIGURES[name][0](tables), tmp_path / f"{name}.png")


def test_modelled_time_gets_its_own_panel(every_method: RunTables) -> None:
    tables = every_method
    assert len(FIGURES["task_metric_curves"][0](tables).axes) == 3
    without = tables.steps.drop(columns="time/exchange_model_ms")
    assert len(FIGURES["task_metric_curves"][0](RunTables(tables.runs, without, tables.epochs)).axes) == 2


def test_no_runs_means_no_figure(tmp_path: Path) -> None:
    empty = load_runs(tmp_path)
    assert all(function(empty) is None for function, _ in FIGURES.values())
