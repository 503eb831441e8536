"""Methods registered only in tests: the worked example's partitioned top-k
(tests/helpers/partitioned_topk.py) and the cheater that sends its top-2k (tests/helpers/cheater.py).

Every process must see them: the test's own (`registered`, which adds them to the registry for
the duration of a `with`), and run.py's and each rank's, which import the registry afresh and find
them through SPARSEBENCH_METHODS naming this module (sparsifiers/registry.py); their YAML files
are written into a folder that `hydra.searchpath` adds to conf/. This module is imported while the
registry itself is being imported, so it imports nothing but the registry's Method.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from sparsifiers.registry import Method

METHODS = (
    Method("partitioned_topk", "tests.helpers.partitioned_topk.PartitionedTopK", "partitioned top-k", partitioned=True),
    Method("top2k", "tests.helpers.cheater.TopTwoK", "top-2k (cheats)"),
)

CHEATER_YAML = """# Sends its top-2k while its target stays k (tests/helpers/cheater.py).
_target_: tests.helpers.cheater.TopTwoK
_partial_: true
name: top2k
density: 0.01
error_feedback: true
exchange: union_allreduce
"""


def write_conf(root: Path) -> str:
    """The two methods' YAML under root/sparsifier/; returns the override that adds root to the
    config search path."""
    from tests.helpers.partitioned_topk import example_yaml

    (root / "sparsifier").mkdir(parents=True, exist_ok=True)
    (root / "sparsifier" / "partitioned_topk.yaml").write_text(example_yaml())
    (root / "sparsifier" / "top2k.yaml").write_text(CHEATER_YAML)
    return f"hydra.searchpath=[file://{root.resolve()}]"


@contextlib.contextmanager
def registered(root: Path) -> Iterator[str]:
    """Within the `with`: the methods registered here and in every process this one starts, their
    YAML under `root`; yields the hydra.searchpath override. The registry is restored after."""
    import pytest

    from sparsifiers import registry

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(registry.EXTRA_METHODS, __name__)
        patch.setattr(registry, "METHODS", (*registry.METHODS, *METHODS))
        for entry in METHODS:
            patch.setitem(registry._BY_NAME, entry.name, entry)
        yield write_conf(root)
