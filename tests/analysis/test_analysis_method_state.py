"""Method state as the sparsifiers really log it: a real short sweep of DEFT, ExDyna and MiCRO
(run.py, one process, 4 steps) is what the DEFT and partition figures are tested on, and the
synthetic runs the other analysis tests use must write exactly the keys these real runs write."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from analysis.figures.deft import deft_units
from analysis.figures.threshold import partition_boundaries
from analysis.load import load_runs
from analysis.synthetic import SyntheticRun, metrics_text
from analysis.tables import RunTables
from experiments.runformat import metric_keys as keys
from experiments.runformat import run_dir as files

pytestmark = pytest.mark.slow  # a real run.py sweep (3 jobs of 4 steps, one process each: ~20 s)
REPO = Path(__file__).resolve().parents[2]
METHODS = ("deft", "exdyna", "micro")
STEPS = 4
# DEFT logs its per-unit lists every log_units_every (100) steps: here at step 0.
SWEEP = ["-m", f"sparsifier={','.join(METHODS)}", "workers=4", "processes=1", "dataset=digits", "model=mlp",
         f"max_steps={STEPS}", "logger=local", "logger.log_every=1", "logger.progress=false", "warmup_steps=0"]


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """method -> the run directory of a real 4-step run of it (W=4), made by run.py."""
    root = tmp_path_factory.mktemp("method_state")
    env = {**os.environ, "WANDB_MODE": "disabled", "MPLCONFIGDIR": str(root / ".mpl")}
    result = subprocess.run([sys.executable, "run.py", *SWEEP, f"output_root={root}"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    (sweep,) = (root / "sweeps").iterdir()
    return {method: next(sweep.glob(f"*_{method}_w4")) for method in METHODS}


def _keys(records: list[dict], kind: str) -> set[str]:
    return set().union(*(record.keys() for record in records if record.get(keys.ROW_KIND) == kind))


@pytest.mark.parametrize("method", METHODS)
def test_synthetic_runs_write_the_keys_the_runner_writes(method: str, real_runs: dict[str, Path]) -> None:
    real = files.read_metrics(real_runs[method] / files.METRICS)
    synthetic = [json.loads(line) for line in metrics_text(SyntheticRun(method, 4, steps=STEPS, epochs=1)).splitlines()]
    for kind in (keys.KIND_TRAIN, keys.KIND_EVAL):
        assert _keys(synthetic, kind) == _keys(real, kind), kind


@pytest.fixture(scope="module")
def real_tables(real_runs: dict[str, Path]) -> RunTables:
    return load_runs(list(real_runs.values()), cache=False)


def test_the_deft_figure_draws_what_deft_logged(real_runs: dict[str, Path], real_tables: RunTables) -> None:
    rows = [r for r in files.read_metrics(real_runs["deft"] / files.METRICS) if r[keys.ROW_KIND] == keys.KIND_TRAIN]
    planned = [r for r in rows if keys.DEFT_UNIT_NORMS in r]
    assert planned, "DEFT logged no per-unit lists"
    last = planned[-1]
    figure = deft_units(real_tables)
    assert figure is not None
    norms_axis, k_axis, loads_axis = figure.axes[:3]
    assert [bar.get_height() for bar in norms_axis.patches] == pytest.approx(last[keys.DEFT_UNIT_NORMS])
    assert [bar.get_height() for bar in k_axis.patches] == pytest.approx(last[keys.DEFT_UNIT_K])
    assert f"step {last[keys.ROW_STEP]}" in norms_axis.get_xlabel()
    lines = loads_axis.get_lines()
    loads = np.array([r[keys.DEFT_BIN_LOADS] for r in planned])
    assert len(lines) == loads.shape[1] == 4  # one bin per worker
    for index, line in enumerate(lines):
        assert list(line.get_xdata()) == [r[keys.ROW_STEP] for r in planned]
        assert list(line.get_ydata()) == pytest.approx(loads[:, index])


def test_the_partition_figure_draws_what_exdyna_logged(real_runs: dict[str, Path], real_tables: RunTables) -> None:
    rows = [r for r in files.read_metrics(real_runs["exdyna"] / files.METRICS) if r[keys.ROW_KIND] == keys.KIND_TRAIN]
    edges = np.array([r[keys.PARTITION_BOUNDARIES] for r in rows])
    figure = partition_boundaries(real_tables)
    assert figure is not None
    lines = figure.axes[0].get_lines()
    assert len(lines) == edges.shape[1] - 2 == 3  # the interior boundaries of W=4 partitions
    for index, line in enumerate(lines, start=1):
        assert list(line.get_xdata()) == [r[keys.ROW_STEP] for r in rows]
        assert list(line.get_ydata()) == pytest.approx(edges[:, index])


def test_every_key_the_runner_writes_is_a_named_constant(real_runs: dict[str, Path]) -> None:
    """One key per fact: what the real runs log (rows and the metrics of summary.json) is named
    in experiments/runformat/metric_keys.py, so analysis and tests can only ask for keys that exist."""
    named = {value for name, value in vars(keys).items() if name.isupper() and isinstance(value, str)}
    for run_dir in real_runs.values():
        logged = set().union(*(record.keys() for record in files.read_metrics(run_dir / files.METRICS)))
        summary = {key for key in files.read_json(run_dir / files.SUMMARY) if "/" in key}
        assert logged | summary <= named, sorted((logged | summary) - named)
