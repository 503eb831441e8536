"""Fixtures of the analysis tests: copies of the real sweep's runs (tests/conftest.py's `sweep`,
which tests/test_run_e2e.py reads too) made to look failed or killed, synthetic studies that
exercise every figure, and a synthetic study of the three task kinds (with stand-in data, an
old-format run and a DGC ablation)."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from analysis.synthetic import SyntheticRun, write_run, write_sweep
from experiments.runformat import run_dir as run_files

# matplotlib fixes its config and cache folder at import: keep it out of $HOME (make test sets it too).
os.environ.setdefault("MPLCONFIGDIR", tempfile.mkdtemp(prefix="sparsebench-mpl-"))


@pytest.fixture(scope="session")
def damaged(sweep: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two copies of sweep runs: `failed_topk` marked failed (no summary), and `killed_dense`
    still `running` with its metrics.jsonl cut in the middle of its last line."""
    root = tmp_path_factory.mktemp("damaged")
    (source_topk,) = sweep.glob("*_topk_w2")
    (source_dense,) = sweep.glob("*_dense_w2")
    failed = shutil.copytree(source_topk, root / "failed_topk")
    (failed / run_files.SUMMARY).unlink()
    run_files.write_json(failed / run_files.STATUS, {"status": "failed", "error": "rank1: RuntimeError: injected"})
    killed = shutil.copytree(source_dense, root / "killed_dense")
    (killed / run_files.SUMMARY).unlink()
    run_files.write_json(killed / run_files.STATUS, {"status": "running"})
    lines = (killed / run_files.METRICS).read_text().splitlines(keepends=True)
    (killed / run_files.METRICS).write_text("".join(lines[:5]) + lines[5][: len(lines[5]) // 2])
    for run, name in ((failed, "failed_topk"), (killed, "killed_dense")):
        env = run_files.read_json(run / run_files.ENV)
        env["job"].update(name=name, group="damaged")
        run_files.write_json(run / run_files.ENV, env)
    return root


@pytest.fixture(scope="session")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every method whose figures need method state (thresholds, partitions, DEFT's lists),
    two seeds, three worker counts, plus one failed and one killed run."""
    root = tmp_path_factory.mktemp("synthetic")
    write_sweep(root / "sweep", ["dense", "topk", "micro", "exdyna", "deft", "dgc"], [2, 4, 8], seeds=2, steps=30, epochs=3)
    write_run(root / "failed", SyntheticRun("micro", 4, status="failed", steps=10))
    write_run(root / "killed", SyntheticRun("topk", 4, status="running", cut=True, steps=10))
    return root


STAND_IN_TEXT = "stand-in: bible-kjv from nltk (one verse a line)"
# The DGC ablation: momentum correction on/off x warm-up on/off; the first variant has two seeds.
DGC_VARIANTS = [((("momentum", m), ("warmup", w)), seeds) for (m, w), seeds in
                (((0.9, True), 2), ((0.9, False), 1), ((0.0, True), 1), ((0.0, False), 1))]


@pytest.fixture(scope="session")
def workloads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder per part, in the runner's current format unless said:
    cifar10/   dense, topk: ResNet-18 on real CIFAR-10 (classification, W=4)
    wikitext2/ dense, topk: LSTM on stand-in WikiText-2 (language model, perplexity)
    movielens/ topk: NCF on real MovieLens (recommendation, HR@10)
    legacy/    topk on mlp/synthetic with an old summary.json (no task, no dataset)
    ablation/  dgc on ResNet-18 / CIFAR-10, DGC_VARIANTS"""
    root = tmp_path_factory.mktemp("workloads")
    small = {"workers": 4, "steps": 12, "epochs": 3}
    for method in ("dense", "topk"):
        write_run(root / "cifar10" / method, SyntheticRun(method, model="resnet18", dataset="cifar10", **small))
        write_run(root / "wikitext2" / method, SyntheticRun(method, task="language_model", source=STAND_IN_TEXT, **small))
    write_run(root / "movielens" / "topk", SyntheticRun("topk", task="recommendation", **small))
    write_run(root / "legacy" / "topk", SyntheticRun("topk", legacy=True, **small))
    for number, (knobs, seeds) in enumerate(DGC_VARIANTS):
        for seed in range(seeds):
            run = SyntheticRun("dgc", seed=seed, model="resnet18", dataset="cifar10", knobs=knobs, **small)
            write_run(root / "ablation" / f"{number}_s{seed}", run)
    return root


@pytest.fixture
def jupyter_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Keeps Jupyter, IPython and matplotlib out of $HOME."""
    for variable in ("JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR", "JUPYTER_CONFIG_DIR", "IPYTHONDIR", "MPLCONFIGDIR"):
        monkeypatch.setenv(variable, str(tmp_path / variable.lower()))
    return tmp_path


@pytest.fixture(scope="module")
def synthetic_tables(synthetic: Path):
    """The synthetic study's tables, as the figures read them (analysis.load)."""
    from analysis.load import load_runs

    return load_runs(synthetic / "sweep")


@pytest.fixture(scope="module")
def synthetic_study(synthetic: Path):
    """The same study read the plain way (tests/helpers/raw_runs.py), for the figure tests'
    independent recomputation."""
    from tests.helpers.figure_checks import METHODS
    from tests.helpers.raw_runs import read_study

    study = read_study(synthetic / "sweep")
    assert sorted(study.runs["method"].unique()) == METHODS and len(study.runs) == 36
    return study
