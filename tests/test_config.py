"""Real Hydra composition: every option of every group composes and builds; bad input fails
before launch with one line naming the key and the fix, exit code 2, no traceback."""
from __future__ import annotations

import os

import pytest
import torch

from experiments.engine.rank.build import build_dataset, build_model, build_optimizer, build_sparsifier
from experiments.engine.launcher.compose import CONF_DIR, compose_job, job_overrides, preflight
from experiments.runformat.errors import ConfigError
from experiments.engine.core.flat_grad import bind_flat_grad
from experiments.engine.launcher.validate import validate
from sparsifiers.common.base import Sparsifier
from tests.conftest import REPO

SMALL = ["dataset=synthetic", "dataset.num_train=64", "dataset.num_test=16", "model=mlp", "model.hidden=16", "batch_size=8"]


def options(group: str) -> list[str]:
    """Every option of a group, nested ones as `paper/selection_time`."""
    return sorted(str(path.relative_to(CONF_DIR / group).with_suffix("")) for path in (CONF_DIR / group).rglob("*.yaml"))


GROUP_OPTIONS = [(group, option) for group in ("sparsifier", "model", "dataset", "optimizer", "schedule", "launcher", "logger", "network")
                 for option in options(group) if not (group == "dataset" and option == "fashion_mnist")]
# Models that are not image classifiers need a dataset of their task (small stand-ins here), and
# the papers' datasets need stand-ins (their files are not on this machine) and a model of theirs.
TEXT = ["dataset=wikitext2", "dataset.if_missing=stand_in", "dataset.stand_in_verses=1000"]
RATINGS = ["dataset=movielens", "dataset.if_missing=stand_in"]
PAIRED = {
    ("model", "lstm"): [*TEXT, "model.hidden=16", "model.layers=2"],
    ("model", "ncf"): [*RATINGS, "model.factors=4", "model.mlp_layers=[8,4]"],
    ("dataset", "wikitext2"): ["dataset.if_missing=stand_in", "dataset.stand_in_verses=1000", "model=lstm", "model.hidden=16", "model.layers=2"],
    ("dataset", "movielens"): ["dataset.if_missing=stand_in", "model=ncf", "model.factors=4", "model.mlp_layers=[8,4]"],
    ("dataset", "cifar10"): ["dataset.if_missing=stand_in", "dataset.stand_in_train=64", "dataset.stand_in_test=16"],
    ("dataset", "cifar100"): ["dataset.if_missing=stand_in", "dataset.stand_in_train=200", "dataset.stand_in_test=16"],
}


@pytest.mark.parametrize("group,option", GROUP_OPTIONS)
def test_every_group_option_composes_validates_and_builds(group, option):
    paired = PAIRED.get((group, option), [])
    replaced = {o.split("=")[0].split(".")[0] for o in paired} | {group}
    overrides = [o for o in SMALL if o.split("=")[0].split(".")[0] not in replaced]
    if group == "optimizer" and option == "released_sgd":
        overrides.append("sparsifier=topk")
    cfg = compose_job([*overrides, f"{group}={option}", *paired, "workers=4"])
    validate(cfg)
    data = build_dataset(cfg)
    model = build_model(cfg, data)
    flat, layout = bind_flat_grad(model)
    sparsifier = build_sparsifier(cfg, layout, rank=3)
    assert isinstance(sparsifier, Sparsifier) and sparsifier.rank == 3 and sparsifier.world_size == 4
    optimizer = build_optimizer(cfg, model, sparsifier)
    assert isinstance(optimizer, torch.optim.Optimizer)
    if data.kind == "classification":
        assert model(data.train_x[:2]).shape == (2, data.num_classes)


def test_fashion_mnist_composes_and_builds_when_present():
    from datasets.fashion_mnist import locate

    cfg = compose_job(["dataset=fashion_mnist"])
    if locate(cfg.dataset.root) is None:
        with pytest.raises(ConfigError, match="apt-get install dataset-fashion-mnist"):
            validate(cfg)
        pytest.skip("Fashion-MNIST is not installed here: the failure message was checked instead")
    validate(cfg)
    data = build_dataset(cfg)
    assert data.train_x.shape == (60000, 1, 28, 28) and data.test_x.shape == (10000, 1, 28, 28)
    assert set(data.train_y.unique().tolist()) == set(range(10))


def test_every_experiment_file_composes():
    """The paper experiments have their own tests (tests/test_paper_experiments.py)."""
    for option in options("experiment"):
        if not option.startswith("paper/"):
            validate(compose_job([f"experiment={option}", *SMALL]))


def test_experiment_values_win_over_the_defaults_and_the_command_line_wins_over_both():
    cfg = compose_job(["experiment=scaling"])
    assert cfg.processes == 1 and cfg.epochs == 1 and cfg.tag == "scaling_vs_workers"
    assert compose_job(["experiment=scaling", "epochs=3"]).epochs == 3
    assert compose_job(["experiment=quickstart"]).epochs == 1


def test_sweep_expands_to_the_product_of_its_values():
    jobs = job_overrides(["-m", "sparsifier=dense,topk", "workers=2,4", "seed=1"])
    assert len(jobs) == 4 and ["sparsifier=topk", "workers=2", "seed=1"] in jobs
    assert job_overrides(["workers=2"]) == [["workers=2"]]


def test_preflight_validates_every_sweep_job():
    with pytest.raises(ConfigError, match="workers must be >= 1"):
        preflight(["-m", "workers=2,0", *SMALL])


def test_missing_fashion_mnist_names_the_fix(tmp_path):
    with pytest.raises(ConfigError, match="dataset=fashion_mnist.*apt-get install dataset-fashion-mnist.*data_dir"):
        validate(compose_job([f"data_dir={tmp_path}", f"dataset.system_dir={tmp_path}/none"]))


BAD_INPUTS = [
    (["worker=4"], "unknown key 'worker'.*Did you mean 'workers'"),
    (["+foo=1"], "unknown key 'foo'"),
    (["sparsifier.densty=0.1"], "unknown key 'sparsifier.densty'"),
    (["+sparsifier.foo=1"], "sparsifier.foo is not a knob of sparsifier=topk; its knobs: density"),
    (["sparsifier.density=1.5"], r"sparsifier.density must be in \(0, 1\], got 1.5"),
    (["sparsifier.density=0"], r"sparsifier.density must be in \(0, 1\], got 0"),
    (["workers=0"], "workers must be >= 1, got 0"),
    # workers=four: test_input_that_does_not_compose_is_answered_before_torch_loads launches it
    (["batch_size=0"], "batch_size must be >= 1, got 0"),
    (["sparsifier=nope"], "sparsifier=nope: no such option; choose one of: .*topk"),
    (["model=resnet9000"], "model=resnet9000: no such option; choose one of: cnn, googlenet, .*resnet18"),
    (["sparsifier.exchange=carrier_pigeon"], "sparsifier.exchange=carrier_pigeon is not supported by topk"),
    (["workers=4", "processes=3"], "workers=4 is not a multiple of processes=3"),
    (["logger.wandb_mode=sometimes"], "logger.wandb_mode must be offline, online or disabled"),
    (["kernels=fast"], "kernels must be auto, torch or compiled, got fast"),
    (["-m", "workers=2,0"], "workers must be >= 1, got 0"),
    (["network.bandwidth_gbit=0"], "network.bandwidth_gbit must be > 0, got 0"),
    (["network.efficiency=1.5"], r"network.efficiency must be in \(0, 1\], got 1.5"),
    (["network=carrier_pigeon"], "network=carrier_pigeon: no such option; choose one of: 100g_ib, 10gbe"),
]


@pytest.mark.parametrize("args,message", BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_exits_2_with_one_line_and_no_traceback(args, message, tmp_path, run_py_before_launch):
    import re

    result = run_py_before_launch([*args, "dataset=digits", f"output_root={tmp_path}"], timeout=120)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert re.search(message, lines[0]), lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    assert not any(tmp_path.iterdir()), "no run directory may be created for bad input"


def test_missing_dataset_fails_before_launch(tmp_path, run_py_before_launch):
    result = run_py_before_launch(["dataset=fashion_mnist", f"data_dir={tmp_path}", f"dataset.system_dir={tmp_path}/none",
                      f"output_root={tmp_path}"], timeout=120)
    assert result.returncode == 2, result.stderr
    assert "apt-get install dataset-fashion-mnist" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()


def test_cfg_job_prints_the_composed_config(run_py_before_launch):
    result = run_py_before_launch(["--cfg", "job", "sparsifier=topk", "sparsifier.density=0.05", "dataset=digits"], timeout=120)
    assert result.returncode == 0, result.stderr
    assert "density: 0.05" in result.stdout and "workers: 4" in result.stdout and "_target_: sparsifiers.topk.TopK" in result.stdout
    assert "--rdzv-conf" not in result.stdout and "rdzv_timeout_s: 600" in result.stdout


def test_slurm_and_multi_node_settings_compose():
    """Slurm through Hydra's submitit launcher; several nodes through torchrun's rendezvous."""
    from experiments.engine.launcher.launch import rank_command
    from experiments.runformat.runtime import resolve

    cfg = compose_job(["hydra/launcher=submitit_slurm", "hydra.launcher.partition=gpu", *SMALL])
    assert cfg.hydra.launcher._target_.endswith("SlurmLauncher") and cfg.hydra.launcher.partition == "gpu"
    cfg = compose_job(["workers=8", "launcher.nnodes=2", "launcher.rdzv_endpoint=node0:29400", *SMALL])
    validate(cfg)
    runtime = resolve(cfg)
    assert runtime.processes_per_node == 4
    from pathlib import Path

    command = rank_command(cfg, runtime, Path("/tmp/run"))
    assert "--nnodes=2" in command and "--nproc-per-node=4" in command and "--rdzv-endpoint=node0:29400" in command
    assert "--max-restarts=0" in command and "--rdzv-backend=c10d" in command


def test_slurm_across_several_nodes_composes_one_agent_per_node(monkeypatch):
    """docs/running.md's Slurm recipe: one task per node (submitit), each node's run.py starts one torchrun
    agent; the rendezvous endpoint is the first node of the allocation, read on the node
    (SLURM_LAUNCH_NODE_IPADDR, where the batch script's srun ran), so every node resolves the
    same endpoint and the same rendezvous id."""
    from pathlib import Path

    from experiments.engine.launcher.launch import rank_command
    from experiments.engine.rank.nodes import rendezvous_id
    from experiments.runformat.runtime import resolve

    recipe = ["hydra/launcher=submitit_slurm", "hydra.launcher.nodes=2", "hydra.launcher.tasks_per_node=1",
              "hydra.launcher.gpus_per_node=4", "workers=8", "launcher.nnodes=2",
              "launcher.rdzv_endpoint=${oc.env:SLURM_LAUNCH_NODE_IPADDR,localhost}:29400", *SMALL]
    cfg = compose_job(recipe)
    assert cfg.hydra.launcher.nodes == 2 and cfg.hydra.launcher.tasks_per_node == 1
    validate(cfg)
    monkeypatch.setenv("SLURM_LAUNCH_NODE_IPADDR", "10.0.0.7")
    ids = set()
    for node in ("node0", "node1"):  # what each node's task composes and launches
        monkeypatch.setenv("SLURMD_NODENAME", node)
        cfg = compose_job(recipe)
        command = rank_command(cfg, resolve(cfg), Path(f"/scratch/{node}/run"))
        assert "--rdzv-endpoint=10.0.0.7:29400" in command and "--nnodes=2" in command
        assert "--nproc-per-node=4" in command and command[1:3] == ["-m", "experiments.engine.launcher.agent"]
        ids.add(rendezvous_id(cfg))
    assert len(ids) == 1


def test_a_sweeping_experiment_without_m_says_it_runs_one_job(capsys, tmp_path):
    """experiment=quickstart sweeps the seed methods; without -m Hydra runs one job: say so."""
    preflight(["experiment=quickstart", "dataset=digits", f"output_root={tmp_path}"])
    note = capsys.readouterr().err.strip()
    assert note.startswith("note: experiment=quickstart sweeps sparsifier=dense,topk,dgc,deft,micro,exdyna;")
    assert "python run.py -m experiment=quickstart" in note
    preflight(["experiment=quickstart", "dataset=digits", "sparsifier=micro", f"output_root={tmp_path}"])
    preflight(["-m", "experiment=quickstart", "dataset=digits", "workers=2", "max_steps=1", f"output_root={tmp_path}"])
    assert capsys.readouterr().err == ""  # the swept key set by hand, or -m: nothing to say


def test_preflight_leaves_the_ranks_heavy_imports_to_the_ranks():
    """run.py validates the default job (digits data, SGD built over a dummy parameter, what only
    torch's SGD refuses still refused) without importing scikit-learn or torch._dynamo: 1.4 s each, which every run
    paid before its ranks paid them again. In the same interpreter, what a rank then does with its
    optimizer (worker.py: the stand-in first; build, step, zero, save and load, every method torch
    wraps for the compiler) leaves dynamo unloaded too (experiments/engine/core/eager.py)."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from experiments.engine.launcher.compose import preflight\n"
        "from experiments.runformat.errors import ConfigError\n"
        "assert preflight(['dataset=digits', 'logger=local']) == 1\n"
        "try:\n"
        "    preflight(['dataset=digits', 'logger=local', '+optimizer.nesterov=true', 'optimizer.momentum=0'])\n"
        "except ConfigError as error:\n"
        "    print('refused:', error)\n"
        "print('loaded:', sorted(m for m in ('sklearn', 'torch._dynamo') if m in sys.modules))\n"
        "import torch\n"
        "from experiments.engine.core.eager import stand_in_for_dynamo_twins\n"
        "from experiments.engine.rank.optimizers import SGD, ReleasedSGD\n"
        "stand_in_for_dynamo_twins(torch.optim.Optimizer)\n"
        "for kind in (SGD, ReleasedSGD):\n"
        "    weight = torch.nn.Parameter(torch.ones(3))\n"
        "    optimizer = kind([weight], lr=0.1, momentum=0.9)\n"
        "    weight.grad = torch.ones(3)\n"
        "    optimizer.step(); optimizer.zero_grad(); optimizer.load_state_dict(optimizer.state_dict())\n"
        "print('rank loaded dynamo:', 'torch._dynamo' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "refused: optimizer=sgd: Nesterov momentum requires a momentum" in result.stdout, result.stdout
    assert "loaded: []" in result.stdout, result.stdout
    assert "rank loaded dynamo: False" in result.stdout, result.stdout


@pytest.mark.parametrize("bad, says", [
    (["workers=four"], "error: workers=four: Value 'four' of type 'str' could not be converted to Integer"),
    (["-m", "workers=2,4", "sparsifier=topk,nope"], "error: sparsifier=nope: no such option"),
    (["resume=outputs/runs/x", "workers=2"], "error: resume=DIR continues a run with its own config.yaml"),
], ids=["type", "sweep-option", "resume"])
def test_input_that_does_not_compose_is_answered_before_torch_loads(bad, says, tmp_path):
    """A typo is answered in about a second: run.py loads torch (2-4 s here) only to validate
    what composed, every job of a sweep first composed. The real command line, its imports
    listed by Python itself. It is also BAD_INPUTS's check of these lines (one line, no
    traceback, no run directory): one launch for both."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-X", "importtime", "run.py", *bad, f"output_root={tmp_path}"], cwd=REPO,
                            capture_output=True, text=True, timeout=120, env={**os.environ, "WANDB_MODE": "disabled"})
    assert result.returncode == 2
    assert "Traceback" not in result.stderr + result.stdout
    assert not any(tmp_path.iterdir()), "no run directory may be created for bad input"
    imported = {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "hydra" in imported and "torch" not in imported
    assert [line for line in result.stderr.splitlines() if not line.startswith("import time:")] == [
        next(line for line in result.stderr.splitlines() if line.startswith(says))]


def test_the_digits_are_scikit_learns_own():
    """datasets/digits.py reads scikit-learn's bundled file itself (without importing scikit-learn):
    the same images and labels, bit for bit, as load_digits."""
    import numpy as np
    from sklearn.datasets import load_digits

    from datasets.digits import bundled_digits

    images, labels = bundled_digits()
    reference = load_digits()
    assert images.dtype == reference.images.dtype and labels.dtype == reference.target.dtype
    assert np.array_equal(images, reference.images) and np.array_equal(labels, reference.target)
