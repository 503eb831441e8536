"""The notebooks are stored without outputs and run end to end against the tiny real sweep; what
they print and display equals what the sweep's files say (tests/helpers/notebook_checks.py)."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.helpers.notebook_checks import check_epoch_tables, check_status_counts, check_summary_table
from tests.helpers.raw_runs import read_study

ANALYSIS = Path(__file__).resolve().parents[2] / "analysis"
NOTEBOOKS = ["scaling.ipynb", "convergence.ipynb", "threshold_control.ipynb"]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_is_stored_without_outputs(name: str) -> None:
    notebook = nbformat.read(ANALYSIS / name, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_end_to_end(name: str, sweep: Path, jupyter_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARSEBENCH_RUNS", str(sweep))
    notebook = nbformat.read(ANALYSIS / name, as_version=4)
    # A failing cell raises CellExecutionError here, with the cell's traceback.
    NotebookClient(notebook, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(ANALYSIS)}}).execute()
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [output for output in outputs if output.output_type == "error"]
    printed = "".join(output.get("text", "") for output in outputs if output.output_type == "stream")
    assert str(sweep) in printed
    images = [output for output in outputs if output.output_type == "display_data" and "image/png" in output.data]
    if name == "threshold_control.ipynb":
        assert "no data" in printed  # dense and topk have no threshold, partitions or DEFT plan
    else:
        assert images
    # Every show() displayed its figure or said "no data"; what the figures plot: test_figure_data.
    shows = sum(cell.source.count("show(") for cell in notebook.cells if cell.cell_type == "code")
    assert len(images) + printed.count("no data") == shows
    raw = read_study(sweep)
    check_status_counts(printed, raw)
    html = [output.data["text/html"] for output in outputs if "text/html" in output.get("data", {})]
    if name == "scaling.ipynb":
        check_summary_table(html, raw)
    if name == "convergence.ipynb":
        check_epoch_tables(html, raw)
