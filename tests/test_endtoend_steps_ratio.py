"""The steps ratio (experiments/studies/endtoend/steps_ratio.py): read from one tiny real sweep
(the convergence sweep's quick version), its refusals, censoring and divergence."""
from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from scipy.stats import t as student_t

from analysis.load import load_runs
from experiments.runformat.run_dir import ANALYSIS_CACHE, CONFIG, ENV, SUMMARY
from experiments.studies.endtoend import report
from experiments.studies.endtoend.convergence import convergence_sweeps
from experiments.studies.endtoend.studies import CALIBRATED, QUICKSTART, RESNET18
from experiments.studies.endtoend.verdicts import ratio_json
from experiments.studies.endtoend.steps_ratio import (StepsRatio, _curves, _steps_to, reported_ratios,
                                                      steps_ratios_from_runs)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """The quick convergence sweep (dense and DEFT, seeds 0-2, digits), run for real."""
    out = tmp_path_factory.mktemp("convergence") / "runs"
    (only,) = convergence_sweeps([QUICKSTART], quick=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    subprocess.run([sys.executable, "run.py", "-m", *only.args, f"hydra.sweep.dir={out}"],
                   cwd=ROOT, env=env, check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def loose(sweep) -> float:
    """A tolerance wide enough that every seed of the short runs reaches the target."""
    tables = load_runs([sweep], cache=False)
    curves, runs = _curves(tables), tables.runs
    final = statistics.fmean(curves[i][-1][1] for i in runs[runs.sparsifier == "dense"].run_id)
    return final - min(max(a for _, a in curve) for curve in curves.values()) + 1e-9


def copy_of(sweep: Path, tmp_path: Path) -> Path:
    target = tmp_path / "runs"
    shutil.copytree(sweep, target, ignore=shutil.ignore_patterns("report", ANALYSIS_CACHE))
    return target


def edit(path: Path, change) -> None:
    """Apply `change` to a run's config or env record."""
    if path.suffix == ".yaml":
        data = yaml.safe_load(path.read_text())
        change(data)
        path.write_text(yaml.safe_dump(data))
    else:
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))


def test_the_ratio_is_the_paired_t_interval_of_per_seed_ratios(sweep, loose):
    ratio = steps_ratios_from_runs([sweep], tolerance=loose)["deft"]
    tables = load_runs([sweep], cache=False)
    curves, runs = _curves(tables), tables.runs
    final = statistics.fmean(curves[i][-1][1] for i in runs[runs.sparsifier == "dense"].run_id)
    steps = {(m, int(s)): _steps_to(curves[i], final - loose) for i, m, s in zip(runs.run_id, runs.sparsifier, runs.seed)}
    assert all(value is not None for value in steps.values()), steps
    per_seed = [steps["deft", s] / steps["dense", s] for s in range(3)]
    mean = statistics.fmean(per_seed)
    half = student_t.ppf(0.975, 2) * statistics.stdev(per_seed) / math.sqrt(3)
    assert (ratio.seeds, ratio.reached) == (3, 3)
    assert ratio.mean == pytest.approx(mean)
    assert ratio.low == pytest.approx(max(0.0, mean - half)) and ratio.high == pytest.approx(mean + half)
    assert ratio.workload == "mlp on digits" and ratio.source.startswith("runs in ")
    assert ratio.final == pytest.approx(statistics.fmean(curves[i][-1][1] for i in runs[runs.sparsifier == "deft"].run_id))


def test_a_diverged_run_never_reaches_the_target(sweep, loose, tmp_path):
    runs = copy_of(sweep, tmp_path)
    summary = next(runs.glob("*_deft_w4_s1")) / SUMMARY
    edit(summary, lambda data: data.update(diverged={"at_step": 4, "why": "test"}))
    ratio = steps_ratios_from_runs([runs], tolerance=loose)["deft"]
    assert (ratio.seeds, ratio.reached, ratio.mean, ratio.high) == (3, 2, None, math.inf)
    assert ratio.low is not None and ratio.low >= 0
    text = report.ratio_text(ratio_json(ratio))  # the page: the censored ratio's bound and how far short it ended
    assert text == f"at least {ratio.low:.2f}, 2 of 3 seeds reached the target, final accuracy {ratio.final:.2%}"


@pytest.mark.parametrize("what, change, message", [
    ("density", lambda c: c["sparsifier"].update(density=0.001), "mix densities 0.001 and 0.01"),
    ("model", lambda c: c["model"].update(name="cnn"), "mix models cnn and mlp"),
    ("device", lambda e: e["resolved"].update(device="cuda"), "mix devices cpu and cuda"),
])
def test_runs_that_differ_are_refused(sweep, tmp_path, what, change, message):
    runs = copy_of(sweep, tmp_path)
    run = next(runs.glob("*_deft_w4_s0"))
    edit(run / (ENV if what == "device" else CONFIG), change)
    with pytest.raises(ValueError, match=message):
        steps_ratios_from_runs([runs])


def test_a_folder_without_dense_is_refused(sweep, tmp_path):
    runs = copy_of(sweep, tmp_path)
    for run in runs.glob("*_dense_*"):
        shutil.rmtree(run)
    with pytest.raises(ValueError, match="no dense baseline"):
        steps_ratios_from_runs([runs])


def test_reported_ratios_invent_nothing():
    """No doc of the project cites a paper's method and dense accuracy after the same epochs."""
    assert reported_ratios() == {}
    assert all(isinstance(r, StepsRatio) and r.source.startswith("reported: ") for r in reported_ratios().values())


def test_the_convergence_sweep_runs_every_method_the_study_prices_in_two_halves():
    """Every method with a break-even cell (and every dense baseline) gets a steps ratio: the
    experiment file's own list (for `python run.py -m experiment=endtoend/convergence`) is what
    make endtoend's two halves run, three seeds or more."""
    experiment = yaml.safe_load((ROOT / "conf/experiment/endtoend/convergence.yaml").read_text())
    swept = experiment["hydra"]["sweeper"]["params"]["sparsifier"].split(",")
    priced = [*RESNET18.methods.split(","), *RESNET18.sparsifiers, *CALIBRATED]
    assert sorted(swept) == sorted(priced) and len(experiment["hydra"]["sweeper"]["params"]["seed"].split(",")) >= 3
    halves = convergence_sweeps([RESNET18], quick=False)
    methods = [arg.split("=", 1)[1].split(",") for sweep in halves for arg in sweep.args if arg.startswith("sparsifier=")]
    assert len(halves) == 2 and sorted(sum(methods, [])) == sorted(swept)
    assert len({sweep.args[-1] for sweep in halves}) == 2 and {sweep.folder for sweep in halves} == {"convergence"}


def test_steps_from_reads_a_study_folder_by_its_convergence_sweep(sweep, loose, tmp_path):
    """make reproduce LONG=1's output (and make endtoend's) holds its convergence runs in
    `convergence/` beside statistics runs of other lengths: --steps-from reads that folder, and
    its ratios name it and say how many seeds they rest on."""
    from experiments.studies.endtoend.verdicts import given_ratios

    study = tmp_path / "long"
    shutil.copytree(sweep, study / "convergence", ignore=shutil.ignore_patterns("report", ANALYSIS_CACHE))
    statistics_run = next((study / "convergence").glob("*_deft_w4_s0"))
    shutil.copytree(statistics_run, study / "statistics" / "0_deft_w2_s0")  # another W: read alone, refused
    edit(study / "statistics" / "0_deft_w2_s0" / CONFIG, lambda c: c["sparsifier"].update(density=0.001))
    (ratio,) = given_ratios(study, tolerance=loose)
    assert (ratio.method, ratio.seeds, ratio.source) == ("deft", 3, "runs in long/convergence")
    assert ratio == steps_ratios_from_runs([study / "convergence"], tolerance=loose, source=ratio.source)["deft"]


def test_a_refused_steps_from_stops_make_endtoend_before_any_run(sweep, tmp_path):
    runs = copy_of(sweep, tmp_path)
    edit(next(runs.glob("*_deft_w4_s0")) / CONFIG, lambda c: c["sparsifier"].update(density=0.001))
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    result = subprocess.run([sys.executable, "-m", "experiments.studies.endtoend", "--quick", "--steps-from", str(runs),
                             "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and not out.exists()
    assert result.stderr.strip().splitlines()[-1].startswith("steps ratio refused: runs in ")
    assert "mix densities 0.001 and 0.01" in result.stderr and "Traceback" not in result.stderr
