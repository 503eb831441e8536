"""The papers' experiments (conf/experiment/paper/) and workloads (conf/workload/): every job of
every sweep composes and validates at the paper's scale (on files in CIFAR's real format) and at
the smoke scale; without the data the paper scale stops before launch naming the files; every
smoke experiment runs through the real command line and its report draws its figure."""
from __future__ import annotations

import functools
import pickle
from pathlib import Path

import numpy as np
import pytest

from experiments.runformat import run_dir as run_files
from experiments.engine.launcher.compose import CONF_DIR, compose_job, preflight
from experiments.engine.launcher.validate import validate
from tests.conftest import run_cli

PAPER = sorted(str(p.relative_to(CONF_DIR / "experiment").with_suffix("")) for p in (CONF_DIR / "experiment" / "paper").glob("*.yaml"))
# The papers' workloads; the laptop workload (scale=laptop's, real Fashion-MNIST, no stand-in) is
# validated with the laptop studies (tests/test_reproduce.py).
LAPTOP_WORKLOAD = "mlp_fashion_mnist"
WORKLOADS = sorted(p.stem for p in (CONF_DIR / "workload").glob("*.yaml") if p.stem != LAPTOP_WORKLOAD)
# The figure (analysis/figures, report/<name>.png) each experiment exists for.
FIGURE = {
    "paper/selection_time": "selection_time_vs_workers",
    "paper/buildup_density": "buildup_density_vs_workers",
    "paper/density_vs_step": "density_vs_step",
    "paper/compression_error": "compression_error",
    "paper/load_imbalance": "load_imbalance_vs_step",
    "paper/deft_units": "deft_units",
    "paper/convergence": "task_metric_curves",
    "paper/step_breakdown": "step_time_breakdown",
    "paper/dgc_ablation": "dgc_ablation",
}


def write_cifar10(root: Path, per_batch: int = 4) -> Path:
    """The python-pickle release of CIFAR-10, with `per_batch` images per file."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8), b"labels": [i % 10 for i in range(per_batch)]}
        (folder / name).write_bytes(pickle.dumps(batch))
    return root


@functools.lru_cache(maxsize=None)
def composed(*overrides: str):
    """compose_job(overrides), composed once for the whole module: each experiment's config was
    composed up to 7 times by the tests below (0.3-0.6 s each). The tests only read it."""
    return compose_job(list(overrides))


def swept(cfg) -> dict[str, list[str]]:
    """key -> values of a composed experiment's own sweep (hydra.sweeper.params)."""
    return {key: str(values).split(",") for key, values in (cfg.hydra.sweeper.get("params") or {}).items()}


def sweep_size(experiment: str, fixed: tuple[str, ...] = ()) -> int:
    """Jobs of the experiment's sweep, keys in `fixed` set once."""
    sweep = swept(composed(f"experiment={experiment}"))
    return int(np.prod([len(values) for key, values in sweep.items() if key not in fixed]))


def test_every_paper_experiment_has_its_figure():
    assert set(PAPER) == set(FIGURE)
    from analysis.figures import FIGURES

    assert set(FIGURE.values()) <= set(FIGURES)


@pytest.mark.parametrize("experiment", PAPER)
def test_paper_scale_validates_every_job_on_real_format_files(experiment, tmp_path):
    data_dir = write_cifar10(tmp_path, per_batch=128)  # 640 training images: a batch of 32 for each of 16 workers
    jobs = preflight(["-m", f"experiment={experiment}", f"data_dir={data_dir}"])
    assert jobs == sweep_size(experiment) >= 1
    cfg = compose_job([f"experiment={experiment}", f"data_dir={data_dir}"])
    # The paper's scale: density 0.001, the released harness, one process per worker.
    assert cfg.sparsifier.density == 0.001 and cfg.processes is None and cfg.max_steps is None
    assert cfg.epochs >= 164 or experiment == "paper/step_breakdown"
    assert cfg.tag == experiment


@pytest.mark.parametrize("experiment", PAPER)
def test_smoke_scale_validates_every_job_without_the_data(experiment, tmp_path):
    jobs = preflight(["-m", f"experiment={experiment}", "scale=smoke", f"data_dir={tmp_path}"])
    assert jobs == sweep_size(experiment)
    cfg = composed(f"experiment={experiment}", "scale=smoke")
    assert cfg.processes == 1 and cfg.max_steps and cfg.dataset.if_missing == "stand_in"
    assert cfg.workers == composed(f"experiment={experiment}").workers, "smoke keeps the paper's workers"


def test_paper_scale_without_the_data_stops_before_launch(tmp_path, run_py_before_launch):
    # A sweep of 2 jobs: run.py composes every job before it validates the first, and
    # selection_time's 28 took 8 s more to be refused the same way.
    result = run_py_before_launch(["-m", "experiment=paper/load_imbalance", f"data_dir={tmp_path}", f"output_root={tmp_path}/out"], timeout=120)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "data_batch_1" in lines[0] and "if_missing=stand_in" in lines[0], lines
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("workload", WORKLOADS)
def test_every_workload_validates_at_smoke_scale(workload, tmp_path):
    cfg = compose_job([f"workload={workload}", "scale=smoke", "workers=2", f"data_dir={tmp_path}"])
    validate(cfg)
    assert cfg.tag == "" and cfg.sparsifier.density in (0.001, 0.1)


def test_ncf_splits_its_global_batch_over_the_workers():
    assert compose_job(["workload=ncf_movielens", "workers=16"]).batch_size == 2**20 // 16
    assert compose_job(["workload=ncf_movielens", "workers=8"]).batch_size == 2**20 // 8


# What each smoke run below sweeps besides workers=2: part of the experiment's sweep where its
# jobs repeat another experiment's (the same method on the same ResNet-18 at W = 2), the whole
# sweep elsewhere. compression_error runs the 7 of its 12 methods that no other smoke run trains on
# the ResNet-18; each other experiment one of the 6 left (deft_units DEFT, its only method), so
# that every method of every sweep still runs once (the test below checks it) and each job costs
# its interpreter's start once: about 10 s on 2 busy cores, most of a 2-step job.
SMOKE_SUBSET = {
    "paper/compression_error": {"sparsifier": "cltk,threshold,gaussiank,sidco,accordion,gtopk,oktopk"},
    "paper/selection_time": {"sparsifier": "topk"},
    "paper/buildup_density": {"sparsifier": "micro"},
    "paper/convergence": {"sparsifier": "dense"},
    "paper/step_breakdown": {"sparsifier": "exdyna"},
    "paper/density_vs_step": {"sparsifier": "sage"},
    "paper/load_imbalance": {"sparsifier": "micro"},
}


def smoke_sweep(experiment: str, cfg) -> dict[str, list[str]]:
    """key -> values the smoke run below sweeps besides workers=2: the experiment's own sweep,
    with SMOKE_SUBSET's lists in place of its own."""
    subset = {key: values.split(",") for key, values in SMOKE_SUBSET.get(experiment, {}).items()}
    return {**{key: values for key, values in swept(cfg).items() if key != "workers"}, **subset}


def test_the_smoke_runs_cover_every_method_of_every_sweep():
    """Every (model, method) pair of every sweep runs in some smoke run below; only the method
    list of a sweep is ever cut (its other keys, such as the DGC ablation's knobs, run whole),
    and only to part of the experiment's own list."""
    assert all(set(subset) == {"sparsifier"} for subset in SMOKE_SUBSET.values())
    wanted, covered = set(), set()
    for experiment in PAPER:
        cfg = composed(f"experiment={experiment}", "scale=smoke")
        sweep, runs = swept(cfg), smoke_sweep(experiment, cfg)
        assert all(set(runs[key]) <= set(sweep[key]) for key in runs), experiment
        wanted |= {(cfg.model.name, method) for method in sweep.get("sparsifier", [cfg.sparsifier.name])}
        covered |= {(cfg.model.name, method) for method in runs.get("sparsifier", [cfg.sparsifier.name])}
    assert wanted == covered and len(wanted) >= 10


@pytest.mark.slow
@pytest.mark.parametrize("experiment", PAPER)
def test_smoke_experiment_runs_and_draws_its_figure(experiment, tmp_path):
    """The smoke scale through the command line, cut to 2 workers, 2 steps per job, batches of 2
    (the ResNets' forward and backward are most of a job's time) and the sweep to SMOKE_SUBSET,
    so that the whole suite stays in its budget. The full smoke sweeps (W up to 16) are what the
    figures of docs/paper_experiments.md come from."""
    out = tmp_path / "out"
    subset = [f"{key}={values}" for key, values in SMOKE_SUBSET.get(experiment, {}).items()]
    args = ["-m", f"experiment={experiment}", "scale=smoke", "workers=2", *subset, "max_steps=2", "batch_size=2", "eval_limit=16",
            f"output_root={out}", f"data_dir={tmp_path}"]
    result = run_cli(args, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    (sweep,) = (out / "sweeps").iterdir()
    runs = sorted(p for p in sweep.iterdir() if (p / run_files.STATUS).exists())
    jobs = smoke_sweep(experiment, composed(f"experiment={experiment}"))
    assert len(runs) == int(np.prod([len(values) for values in jobs.values()]))
    for run in runs:
        assert run_files.read_json(run / run_files.STATUS)["status"] == "done"
        summary = run_files.read_json(run / run_files.SUMMARY)
        assert summary["dataset"]["source"].startswith("stand-in") and summary["steps"] == 2
    assert (sweep / "report" / f"{FIGURE[experiment]}.png").stat().st_size > 10_000


@pytest.mark.slow
@pytest.mark.parametrize("workload, metric", [("lstm_wikitext2", "eval/perplexity"), ("ncf_movielens", "eval/hr10")])
def test_language_model_and_recommendation_workloads_train_and_report_their_metric(workload, metric, tmp_path):
    args = [f"workload={workload}", "scale=smoke", "workers=2", "sparsifier=micro", "max_steps=3",
            f"output_root={tmp_path}/out", f"data_dir={tmp_path}"]
    if workload == "lstm_wikitext2":
        args.append("dataset.stand_in_verses=3000")
    result = run_cli(args, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (run,) = (tmp_path / "out" / "runs").iterdir()
    summary = run_files.read_json(run / run_files.SUMMARY)
    assert summary["task"]["metric"] == metric and summary[metric] > 0
    assert summary["dataset"]["source"].startswith("stand-in")
    label = {"eval/perplexity": "perplexity", "eval/hr10": "HR@10"}[metric]
    assert label in result.stdout
