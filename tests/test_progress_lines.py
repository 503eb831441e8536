"""Lines printed while rank 0's progress bar is drawn stay whole lines (experiments/runformat/console.py,
issue 11 item 7): real runs with the bar forced on (logger.progress=true; the bar is drawn on
stderr whether or not it is a terminal), their stderr rendered as a terminal shows it."""
from __future__ import annotations

import io
import sys
import warnings

import pytest
from tqdm import tqdm

from experiments.runformat import run_dir as run_files
from experiments.runformat.console import route_warnings, say
from experiments.runformat.run_dir import read_metrics
from tests.conftest import TINY_RUN, run_cli

# Rank 1, hosted beside rank 0 (which draws the bar): the failing run below is also
# tests/test_run_e2e.py's one-process case of a NaN gradient failing the run naming its rank.
FAULT = ["sparsifier._target_=tests.helpers.fault_injection.NaNGradientTopK", "+sparsifier.nan_rank=1", "+sparsifier.nan_step=3"]
BAR = [*TINY_RUN, "logger.progress=true", "workers=2", "processes=1", "max_steps=6", *FAULT]


def render(raw_line: str) -> str:
    """One line as a terminal shows it: '\\r' returns to column 0, later characters overwrite."""
    cells: list[str] = []
    column = 0
    for char in raw_line:
        if char == "\r":
            column = 0
            continue
        if column < len(cells):
            cells[column] = char
        else:
            cells.append(char)
        column += 1
    return "".join(cells).rstrip()


def assert_whole_line(stderr: str, marker: str) -> str:
    """The terminal line holding `marker` begins with it and holds nothing of a bar drawn
    before it on that line (its tail would show after a shorter line)."""
    lines = [line for line in stderr.split("\n") if marker in line]
    assert lines, f"{marker!r} not printed:\n{stderr[-3000:]}"
    for line in lines:
        shown, written = render(line), line.split("\r")[-1].rstrip()
        assert shown.startswith(marker) and shown == written, f"garbled line {line!r}"
    return render(lines[0])


@pytest.mark.slow  # real runs of run.py
def test_a_failure_over_the_progress_bar_is_printed_on_lines_of_its_own(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli([*BAR, f"hydra.run.dir={run_dir}"], timeout=180)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "epoch 0:" in result.stderr  # the bar was drawn
    assert_whole_line(result.stderr, "Traceback (most recent call last):")
    assert "non-finite gradient at step 3 on rank 1" in assert_whole_line(result.stderr, "run failed: ")
    # The run itself (test_run_e2e.py's NaN-gradient check, one process): failed at its step naming
    # the rank; steps 0-2 are logged, and nothing after.
    status = run_files.read_json(run_dir / run_files.STATUS)
    assert status["status"] == "failed"
    assert "non-finite gradient at step 3 on rank 1" in status["error"], status["error"]
    assert [r["step"] for r in read_metrics(run_dir / run_files.METRICS) if r["kind"] == "train"] == [0, 1, 2]
    assert not (run_dir / run_files.SUMMARY).exists()


@pytest.mark.slow  # real runs of run.py
def test_a_skip_warning_is_printed_above_the_progress_bar(tmp_path):
    result = run_cli([*BAR, "on_nonfinite=skip", f"hydra.run.dir={tmp_path / 'run'}"], timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "epoch 0:" in result.stderr
    assert_whole_line(result.stderr, "warning: step 3 skipped (non-finite gradient at step 3 on rank 1")


def test_say_and_python_warnings_print_above_a_drawn_bar(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)  # where the rank's bar and warnings go
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # restored after the test
    route_warnings()
    bar = tqdm(total=10, desc="epoch 0", file=sys.stderr, leave=False, mininterval=0)
    bar.update(3)
    say("a line of its own")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn_explicit("a library's warning", UserWarning, "lib.py", 7)
    bar.close()
    assert_whole_line(stream.getvalue(), "a line of its own")
    assert_whole_line(stream.getvalue(), "lib.py:7: UserWarning: a library's warning")


@pytest.mark.slow
def test_another_process_failing_under_the_bar_prints_whole_lines(tmp_path):
    """Process 1 fails while process 0 draws the bar on the same terminal: its traceback, and
    run.py's line after torchrun ended the job, start on a clean line."""
    crash = ["sparsifier._target_=tests.helpers.fault_injection.CrashingTopK", "+sparsifier.crash_rank=1", "+sparsifier.crash_step=3"]
    result = run_cli([*TINY_RUN, "logger.progress=true", "workers=2", "processes=2", "max_steps=6", *crash,
                      f"hydra.run.dir={tmp_path / 'run'}"], timeout=240)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "epoch 0:" in result.stderr
    assert_whole_line(result.stderr, "Traceback (most recent call last):")
    assert "injected fault on rank 1 at step 3" in assert_whole_line(result.stderr, "run failed: ")
