"""The training loop reads top to bottom (docs/architecture.md, "One step"): no function of
experiments/engine/rank/train.py runs over MAX_LINES lines; what grows goes into a helper named for
what it does (the hosted ranks' step: experiments/engine/core/hosted.py; what a run records:
experiments/engine/rank/run_log.py)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 80
SHORT = ("experiments/engine/rank/train.py",)


def function_lengths(path: Path) -> dict[str, int]:
    """Every function and method of `path` (nested ones too): name -> lines, decorators and
    docstring included."""
    tree = ast.parse(path.read_text())
    return {node.name: node.end_lineno - (node.decorator_list[0].lineno if node.decorator_list else node.lineno) + 1
            for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_no_function_of_the_training_loop_runs_over_80_lines():
    for name in SHORT:
        long = {function: lines for function, lines in function_lengths(ROOT / name).items() if lines > MAX_LINES}
        assert not long, f"{name}: {long} over {MAX_LINES} lines: split them into helpers named for what they do"


def test_the_length_check_sees_a_long_function(tmp_path):
    source = tmp_path / "long.py"
    source.write_text("def short():\n    pass\n\n\ndef long():\n" + "    x = 1\n" * MAX_LINES)
    assert function_lengths(source) == {"short": 2, "long": MAX_LINES + 1}
