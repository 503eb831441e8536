"""Shared test set-up: W&B never reaches the network, caches stay out of $HOME, helpers to run
the real command line, and a sink that keeps the training loop's rows in memory."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# Threads that wait for work sleep instead of spinning (OpenMP reads this when torch loads it,
# here and in every process a test starts, which inherit it). Spinning threads are idle cores
# only on an idle machine: with two tests running at once (pytest -n 2) or another load beside,
# a 2-thread ResNet-18 step took 2-3 s instead of 0.15 s. What the threads compute is the same.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
import torch  # noqa: E402

from tests.helpers.cli_fork import RunPyForks  # noqa: E402
from tests.helpers.compose_cache import CACHE_VARIABLE as COMPOSE_CACHE  # noqa: E402
from tests.helpers.shared_build import built_once, shared_temp  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# Small tasks that need no download, for runs the tests launch.
TINY_RUN = ["dataset=digits", "logger=local", "logger.log_every=1", "logger.progress=false", "warmup_steps=0"]


class ListSink:
    """The training loop's sink (experiments/engine/rank/sinks.py) for `train()` run in a test's own
    process: every logged row, with its step."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def log(self, record: dict, step: int) -> None:
        self.rows.append({**record, "step": step})


@pytest.fixture(autouse=True, scope="session")
def _quiet_environment(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    os.environ.setdefault("WANDB_MODE", "disabled")  # online W&B without network hangs for 90 s
    os.environ["MPLCONFIGDIR"] = str(cache / "matplotlib")
    os.environ["WANDB_DIR"] = str(cache / "wandb")
    os.environ["WANDB_CACHE_DIR"] = str(cache / "wandb")
    os.environ["WANDB_CONFIG_DIR"] = str(cache / "wandb")
    # Both safe to share between processes (written atomically), so shared by the xdist workers too:
    shared = shared_temp(tmp_path_factory) / "shared-cache"
    os.environ["SPARSEBENCH_CACHE_DIR"] = str(shared / "sparsebench")  # decoded datasets (datasets/cache.py)
    os.environ[COMPOSE_CACHE] = str(shared / "composed")  # the test worlds' configs (tests/helpers/compose_cache.py)
    torch.set_num_threads(1)
    yield


def run_cli(args: list[str], env: dict[str, str] | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python run.py ARGS` as a user types it; returns the finished process."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, str(REPO / "run.py"), *args],
        cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture(scope="session")
def run_py_before_launch(tmp_path_factory):
    """run_cli for commands that end before run.py launches anything (a refusal, --help, --cfg):
    each forked from a process that has imported run.py's modules (tests/helpers/cli_fork.py), 0.5 s
    instead of 4-5 s."""
    forks = RunPyForks(tmp_path_factory.mktemp("run-py-forks"))
    yield forks.run
    forks.close()


def run_world(script_and_args: list[str], processes: int, timeout: int = 600, torchrun: bool = False) -> None:
    """Runs a test script (tests/helpers/harness.py, tests/helpers/resume_harness.py) in one process, or in
    `processes` gloo processes under torchrun (also one, with `torchrun`); fails the test with
    its stderr if it fails."""
    if processes == 1 and not torchrun:
        command = [sys.executable, *script_and_args]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={processes}",
                   "--max-restarts=0", "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:0", *script_and_args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-4000:]


# A real 2 x 2 sweep through run.py's command line: dense and Top-k at W = 2 and 4, hosted, 12
# steps logged every 2. test_run_e2e.py checks what the sweep writes and prints; the analysis
# tests load, report and draw it. Each launched its own until they shared this one (4 jobs and a
# report, about 20 s on 2 busy cores).
SWEEP = ["-m", "sparsifier=dense,topk", "workers=2,4", "processes=1", "dataset=digits", "max_steps=12",
         "logger=local", "logger.log_every=2", "logger.progress=false"]
SWEEP_STDOUT = "run.py.stdout"  # what run.py printed, beside (not in) the output root's sweeps/


def make_sweep(root: Path) -> None:
    env = {**os.environ, "WANDB_MODE": "disabled", "MPLCONFIGDIR": str(root / ".mpl")}
    result = subprocess.run(
        [sys.executable, "run.py", *SWEEP, f"output_root={root}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    (root / SWEEP_STDOUT).write_text(result.stdout)


@pytest.fixture(scope="session")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SWEEP made by run.py: its folder (run.py's stdout: sweep_stdout). Made once for both
    xdist workers (tests/helpers/shared_build.py): no test changes its runs (the analysis cache
    that loading writes beside them is written atomically)."""
    root = built_once(tmp_path_factory, "real-sweep", make_sweep)
    (sweep_dir,) = (root / "sweeps").iterdir()
    assert len(list(sweep_dir.glob("*/status.json"))) == 4
    return sweep_dir


def sweep_stdout(sweep_dir: Path) -> str:
    """What run.py printed while it made the `sweep` fixture's folder."""
    return (sweep_dir.parents[1] / SWEEP_STDOUT).read_text()
