"""The refusal tests' forked run.py (tests/helpers/cli_fork.py) answers exactly as a fresh interpreter does:
same exit status, same stdout, same stderr, nothing written."""
from __future__ import annotations

import pytest

from tests.conftest import run_cli


@pytest.mark.parametrize("args", [
    ["sparsifier.density=1.5", "dataset=digits"],  # a refusal: one line on stderr, exit 2
    ["--cfg", "job", "sparsifier=micro", "dataset=digits"],  # stdout, exit 0
], ids=["refusal", "cfg"])
def test_a_forked_run_py_answers_as_a_fresh_one(args, tmp_path, run_py_before_launch):
    fresh_root, forked_root = tmp_path / "fresh", tmp_path / "forked"
    fresh = run_cli([*args, f"output_root={fresh_root}"], timeout=120)
    forked = run_py_before_launch([*args, f"output_root={forked_root}"], timeout=120)
    assert forked.returncode == fresh.returncode
    assert forked.stderr == fresh.stderr
    assert forked.stdout.replace(str(forked_root), str(fresh_root)) == fresh.stdout
    assert not fresh_root.exists() and not forked_root.exists()


def test_a_timed_out_command_ends_and_the_next_one_is_served(run_py_before_launch):
    import subprocess

    with pytest.raises(subprocess.TimeoutExpired):
        run_py_before_launch(["--help"], timeout=0.01)
    assert run_py_before_launch(["workers=0", "dataset=digits"], timeout=120).returncode == 2
