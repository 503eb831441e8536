"""Every benchmark lives in experiments/benchmarks/ and runs from one entry, `make bench MODE=...`:
the Makefile's dispatch (dry runs), and the load benchmark run through it for real at tiny sizes."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")

BENCHMARKS = REPO / "experiments" / "benchmarks"
# MODE -> the module it runs, and the arguments the Makefile adds before ARGS.
MODES = {"select": ("select", ""), "step": ("step", " --hosted 64"), "load": ("load", ""),
         "memory": ("hosted_memory", ""), "ddp": ("ddp_hook", ""), "startup": ("startup", ""),
         "ops": ("op_counts", "")}
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
    assert result.stdout.strip() == f"{sys.executable} -m experiments.benchmarks.{module}{added} --repeats 1"


def test_an_unknown_mode_names_the_modes():
    result = make_bench("loads", dry_run=True)
    assert result.returncode != 0
    assert "MODE must be select, step, load, memory, ddp, startup or ops, got loads" in result.stderr


def test_make_bench_load_runs_at_tiny_sizes():
    result = make_bench("load", "--runs 4 --steps 10 --repeats 1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("tables: runs 4, steps 40 ") for line in lines), result.stdout
    assert [line.split()[0] for line in lines[-3:]] == ["parse", "cold", "cached"]
