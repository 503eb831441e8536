"""The worked example of docs/adding_a_sparsifier.md as a test fixture: `PartitionedTopK` is the
page's module, executed here from the page itself, so the fixture and the page cannot differ.

Its class lives in this module (`tests.helpers.partitioned_topk.PartitionedTopK`), importable by
run.py and by every rank process, which the page's own `sparsifiers/partitioned_topk.py` is not:
the method is registered only in tests (tests/helpers/fixture_methods.py), never among the
project's methods.
"""
from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "adding_a_sparsifier.md"


def example_blocks() -> dict[str, list[str]]:
    """The fenced blocks of docs/adding_a_sparsifier.md, by language."""
    blocks: dict[str, list[str]] = {}
    for language, body in re.findall(r"^```(\w*)\n(.*?)^```", DOC.read_text(), re.S | re.M):
        blocks.setdefault(language, []).append(body)
    return blocks


def example_yaml() -> str:
    """The page's conf/sparsifier/partitioned_topk.yaml, its `_target_` pointing here."""
    text = example_blocks()["yaml"][0]
    return re.sub(r"^_target_: .*$", f"_target_: {__name__}.PartitionedTopK", text, count=1, flags=re.M)


# The page's module, run in this module's namespace: its class's __module__ is this module's name.
exec(compile(example_blocks()["python"][0], f"{DOC} (module)", "exec"), globals())
