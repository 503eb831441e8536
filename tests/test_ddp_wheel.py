"""The DDP hook from an installed wheel, outside the clone (docs/ddp_hook.md): no conf/, no Hydra.

The test builds a wheel of sparsebench, installs it into a fresh virtual environment in a
temporary folder, and runs a user's small DDP script there (tests/helpers/ddp_wheel_script.py: 2 gloo
processes, a state object and a hook function registered as torch's hooks are, 2 optimizer
steps), from a temporary working directory. Then the same script runs against the clone; both
must train bit for bit the same parameters.

torch comes from the test's own environment: that environment is itself a virtual environment,
so `--system-site-packages` would not reach it; a .pth file in the fresh environment names its
site-packages instead. Python adds such a folder to sys.path without running the .pth files in
it, so the clone's editable install (a finder started by a .pth there) stays out: before the
wheel is installed, sparsebench must not import at all.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO

pytestmark = pytest.mark.slow  # a wheel build, a pip install and two 2-process runs: about 25 s on 2 cores

SCRIPT = Path(__file__).resolve().parent / "helpers" / "ddp_wheel_script.py"
WORLD_SIZE = 2
TIMEOUT = 180


def packaged_sources(into: Path) -> Path:
    """What the wheel is built from, copied out of the clone: pip builds a source folder in place
    (build/, *.egg-info), which must not land in the clone."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    into.mkdir()
    for name in ("pyproject.toml", project["project"]["readme"]):
        shutil.copy2(REPO / name, into / name)
    for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]:
        package = pattern.rstrip("*")
        shutil.copytree(REPO / package, into / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return into


def quiet_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment of every child: nothing in $HOME, no W&B, one thread each."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    return {**env, "WANDB_MODE": "disabled", "MPLCONFIGDIR": str(tmp / "matplotlib"), "NUMBA_CACHE_DIR": str(tmp / "numba"),
            "OMP_NUM_THREADS": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1", **extra}


def run(command: list, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    result = subprocess.run([str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=TIMEOUT)
    assert result.returncode == 0, f"{command}:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    return result


def train_two_ranks(python: list, folder: Path, env: dict[str, str]) -> dict:
    """The script on WORLD_SIZE processes, from `folder` (outside the clone); rank 0's result."""
    folder.mkdir()
    script = shutil.copy2(SCRIPT, folder / SCRIPT.name)
    store, out = folder / "store", folder / "result.json"
    ranks = [subprocess.Popen([*map(str, python), str(script), str(rank), str(WORLD_SIZE), str(store), str(out)],
                              cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in range(WORLD_SIZE)]
    try:
        finished = [rank.communicate(timeout=TIMEOUT) for rank in ranks]
    finally:
        for rank in ranks:
            if rank.poll() is None:
                rank.kill()
    for rank, (_, stderr) in zip(ranks, finished):
        assert rank.returncode == 0, stderr[-4000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """A fresh virtual environment with sparsebench's wheel installed: (its python, its site-packages)."""
    tmp = tmp_path_factory.mktemp("ddp_wheel")
    env = quiet_env(tmp)
    wheels = tmp / "wheels"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", wheels,
         packaged_sources(tmp / "source")], cwd=tmp, env=env)
    [wheel] = wheels.glob("sparsebench-*.whl")

    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp, env=env)
    python = venv / "bin" / "python"
    site = Path(run([python, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                    cwd=tmp, env=env).stdout.strip()).resolve()
    torch_site = Path(torch.__file__).resolve().parents[1]  # torch, numba, pip, ...: not reinstalled
    (site / "test_environment.pth").write_text(f"{torch_site}\n")
    missing = subprocess.run([python, "-I", "-c", "import experiments"], cwd=tmp, env=env, capture_output=True, text=True)
    assert missing.returncode != 0, "sparsebench imports in the fresh environment before its wheel is installed"

    # --ignore-installed: the linked site-packages holds the clone's editable install's record.
    run([python, "-I", "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", wheel], cwd=tmp, env=env)
    return python, site


def test_the_wheel_holds_no_conf_and_trains_as_the_clone(installed, tmp_path):
    python, site = installed
    from_wheel = train_two_ranks([python, "-I"], tmp_path / "wheel", quiet_env(tmp_path))
    for name in ("sparsifiers_file", "experiments_file"):
        assert Path(from_wheel[name]).is_relative_to(site), f"{name} {from_wheel[name]} is not the installed wheel's"
    assert not (site / "conf").exists() and not (Path(from_wheel["experiments_file"]).parents[1] / "conf").exists()
    assert from_wheel["imported_clone_only"] == [], "the hook's path imported the clone's config machinery"
    assert from_wheel["hook_steps"] == 2 and from_wheel["stats"]["traffic/sent_bytes_max"] > 0

    from_clone = train_two_ranks([sys.executable], tmp_path / "clone", quiet_env(tmp_path, PYTHONPATH=str(REPO)))
    assert Path(from_clone["sparsifiers_file"]).is_relative_to(REPO)
    for key in ("parameters_sha256", "residual_sha256", "hook_steps"):
        assert from_wheel[key] == from_clone[key], f"{key}: the wheel trained otherwise than the clone"

