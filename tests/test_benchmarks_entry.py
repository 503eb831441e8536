"""Every benchmark lives in experiments/studies/benchmarks/ and runs from one entry, `make bench MODE=...`:
the Makefile's dispatch (dry runs), and the load benchmark run through it for real at tiny sizes."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")

BENCHMARKS = REPO / "experiments" / "studies" / "benchmarks"
# MODE -> the module it runs, and the arguments the Makefile adds before ARGS.
MODES = {"select": ("select", ""), "step": ("step", " --hosted 64"), "load": ("load", ""),
         "memory": ("hosted_memory", ""), "ddp": ("ddp_hook", ""), "startup": ("startup", ""),
         "ops": ("op_counts", ""), "unit_topk": ("unit_topk", "")}
PACKAGES = ("analysis", "experiments", "sparsifiers", "models", "datasets")


def make_bench(mode: str, args: str = "", dry_run: bool = False) -> subprocess.CompletedProcess:
    """`make bench MODE=mode ARGS=args` with this interpreter (PY=...) and the venv's install
    stamp taken as up to date (-o): the test checks the entry, not the bootstrap."""
    command = ["make", "-s", "-o", ".venv/.installed", "bench", f"MODE={mode}", f"PY={sys.executable}", f"ARGS={args}"]
    if dry_run:
        command.insert(1, "-n")
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)


def test_every_benchmark_is_in_experiments_benchmarks_and_has_a_mode():
    """A module with a main() there is a benchmark; each must be reachable from `make bench`,
    and no benchmark may live elsewhere (the load benchmark was analysis/bench_load.py)."""
    runnable = {path.stem for path in BENCHMARKS.glob("*.py") if "\ndef main(" in path.read_text()}
    assert runnable == {module for module, _ in MODES.values()}
    elsewhere = [path for package in PACKAGES for path in (REPO / package).rglob("*bench*.py")
                 if BENCHMARKS not in path.parents]
    assert elsewhere == []


@pytest.mark.parametrize("mode", sorted(MODES))
def test_make_bench_runs_the_modes_module(mode):
    module, added = MODES[mode]
    result = make_bench(mode, "--repeats 1", dry_run=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{sys.executable} -m experiments.studies.benchmarks.{module}{added} --repeats 1"


def test_an_unknown_mode_names_the_modes():
    result = make_bench("loads", dry_run=True)
    assert result.returncode != 0
    assert "MODE must be select, step, load, memory, ddp, startup, ops or unit_topk, got loads" in result.stderr


def test_make_bench_load_runs_at_tiny_sizes():
    result = make_bench("load", "--runs 4 --steps 10 --repeats 1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("tables: runs 4, steps 40 ") for line in lines), result.stdout
    assert [line.split()[0] for line in lines[-3:]] == ["parse", "cold", "cached"]


@pytest.mark.parametrize("mode, module, added", [("select", "select", ""), ("step", "step", " --hosted 64"),
                                                ("unit_topk", "unit_topk", "")])
def test_device_goes_to_select_and_step_as_an_argument(mode, module, added):
    command = ["make", "-s", "-n", "-o", ".venv/.installed", "bench", f"MODE={mode}", f"PY={sys.executable}",
               "DEVICE=cuda", "ARGS=--repeats 1"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{sys.executable} -m experiments.studies.benchmarks.{module}{added} --device cuda --repeats 1"


@pytest.mark.parametrize("module", ["select", "step", "unit_topk"])
@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a GPU is here: cuda is not refused")
def test_device_cuda_without_a_gpu_is_refused_in_one_line_exit_2(module):
    result = subprocess.run([sys.executable, "-m", f"experiments.studies.benchmarks.{module}", "--device", "cuda"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no GPU here" in lines[0] and "drop DEVICE=cuda" in lines[0], result.stderr


def test_select_writes_its_numbers_as_json(tmp_path):
    """The layout of the first H200 measurement's select.json (conf/compute_profile/h200.yaml quotes it):
    N, k, device, torch, the two baselines, rows per (method, backend, W)."""
    import json

    out = tmp_path / "select.json"
    result = subprocess.run([sys.executable, "-m", "experiments.studies.benchmarks.select", "--repeats", "1", "--workers", "1,4",
                             "--methods", "micro", "--backends", "torch", "--out", str(out)], cwd=REPO,
                            capture_output=True, text=True, timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr
    numbers = json.loads(out.read_text())
    assert numbers["N"] == 11_173_962 and numbers["k"] == 11_173 and numbers["device"] == "cpu"
    assert numbers["copy_ms"] > 0 and numbers["topk_ms"] > 0 and numbers["torch"]
    assert [(row["method"], row["backend"], row["W"]) for row in numbers["rows"]] == [("micro", "torch", 1), ("micro", "torch", 4)]
    assert all(row["select_ms"] > 0 and row["plan_ms"] is None and row["count"] > 0 for row in numbers["rows"])


def test_the_benchmarks_time_between_synchronizations_on_cuda_only():
    from experiments.studies.benchmarks.select import _synchronizer, device_problem
    from experiments.studies.benchmarks.step import distributed_skip

    assert _synchronizer("cpu") is None and _synchronizer("cuda") is not None
    assert device_problem("cpu", False) is None and device_problem("cuda", True) is None
    assert "no GPU here" in device_problem("cuda", False)
    assert distributed_skip(2, "cuda", 1) == "W = 2 on CUDA needs 2 GPUs (one per NCCL process), 1 here"
    assert distributed_skip(2, "cuda", 2) is None and distributed_skip(4, "cpu", 0) is None


def test_the_share_outside_forward_and_backward_is_the_step_less_every_ranks_compute():
    from experiments.studies.benchmarks.outside_share import outside_share

    rows = [{"step": s, "kind": "train", "time/step_ms": 200.0, "time/compute_ms_mean": 11.0 + (s == 0) * 5,
             "time/select_ms_mean": 0.5, "time/exchange_ms": 1.0} for s in range(6)]
    rows.append({"step": 5, "kind": "eval", "eval/accuracy": 0.5})
    share = outside_share(rows, workers=16, warmup_steps=1)
    assert share["steps"] == 5 and share["compute_ms"] == 176.0
    assert abs(share["outside_share"] - 0.12) < 1e-12  # 24 of 200 ms
    with pytest.raises(ValueError, match="no timed train rows"):
        outside_share(rows, workers=16, warmup_steps=10)
