"""The run-directory module (experiments/runformat/run_dir.py) is the one statement of the run format: its
readers read what the store writes, a killed run's cut line and a damaged line are skipped the
same way by the plain reader and the analysis's columnar one, and no other Python file of the
repository spells a run file's name."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from analysis.metrics_io import parse_jsonl
from experiments.runformat import metric_keys as keys
from experiments.runformat import run_dir as files
from experiments.runformat.store import RunStore

REPO = Path(__file__).resolve().parents[1]

RECORDS = [
    {keys.ROW_STEP: 0, keys.ROW_KIND: keys.KIND_TRAIN, keys.LOSS: 2.5, keys.DENSITY_ERROR: float("nan"),
     keys.DEFT_UNIT_NORMS: [0.5, 1.5]},
    {keys.ROW_STEP: 1, keys.ROW_KIND: keys.KIND_TRAIN, keys.LOSS: 2.25, keys.DENSITY_ERROR: 0.125,
     keys.DEFT_UNIT_NORMS: [0.25, 1.0]},
    {keys.ROW_STEP: 1, keys.ROW_KIND: keys.KIND_EVAL, keys.ACCURACY: 0.5},
]


def _written_by_the_store(tmp_path: Path) -> Path:
    """A run directory whose metrics.jsonl the store's writer wrote, then a damaged complete line
    and a last line cut by a kill (as a crash mid-write leaves it)."""
    store = RunStore(tmp_path)
    writer = store.open_metrics()
    for record in RECORDS[:2]:
        writer.write(record)
    writer.close()
    with open(store.path(files.METRICS), "a") as handle:
        handle.write('{"step": 2, "kind": "tr\n')  # complete (ends in a newline) but not JSON
        handle.write(files.dumps(RECORDS[2]) + "\n")
        handle.write(files.dumps({keys.ROW_STEP: 3, keys.LOSS: 2.0})[:12])  # cut: no newline
    return store.path(files.METRICS)


def test_the_reader_reads_what_the_store_writes(tmp_path: Path) -> None:
    path = _written_by_the_store(tmp_path)
    got = files.read_metrics(path)
    # NaN is written as null; the bad line and the cut line are skipped; the order is kept.
    expected = [{**RECORDS[0], keys.DENSITY_ERROR: None}, RECORDS[1], RECORDS[2]]
    assert got == expected
    parsed = parse_jsonl(path.read_bytes())  # the analysis's columnar reader: the same rule
    assert parsed.cut and parsed.bad_lines == 1
    assert parsed.train.column(keys.LOSS).to_pylist() == [2.5, 2.25]
    assert parsed.train.column(keys.DEFT_UNIT_NORMS).to_pylist() == [[0.5, 1.5], [0.25, 1.0]]
    assert parsed.evals.column(keys.ACCURACY).to_pylist() == [0.5]
    assert files.metrics_text(RECORDS[:2]) == "".join(line for line in path.read_text().splitlines(keepends=True)[:2])


def test_json_files_round_trip_and_damage_is_told_from_absence(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.set_status("running", started=1.0)
    store.set_status("done")
    status = files.read_json(tmp_path / files.STATUS)
    assert status["status"] == "done" and status["started"] == 1.0  # the store keeps the run's start
    summary = {keys.DENSITY_ERROR: 0.25, keys.ACCURACY: 0.75}
    files.write_json(tmp_path / files.SUMMARY, summary)
    assert files.try_read_json(tmp_path / files.SUMMARY) == summary
    files.write_yaml(tmp_path / files.CONFIG, {"sparsifier": {"name": "deft"}, "workers": 4})
    assert files.try_read_yaml(tmp_path / files.CONFIG) == {"sparsifier": {"name": "deft"}, "workers": 4}
    assert files.read_json(tmp_path / files.ENV) is None and files.try_read_json(tmp_path / files.ENV) is None
    (tmp_path / files.ENV).write_text('{"resolved": {"wor')  # cut by hand
    with pytest.raises(json.JSONDecodeError):  # the store and the resume checks must see the damage
        files.read_json(tmp_path / files.ENV)
    assert files.try_read_json(tmp_path / files.ENV) is None  # the analysis must never fail on it
    assert files.holds_run({files.STATUS}) and files.holds_run({files.CONFIG, files.METRICS})
    assert not files.holds_run({files.CONFIG, "hydra.yaml", "overrides.yaml"})  # a Hydra .hydra/ folder


def test_non_finite_values_become_null() -> None:
    assert json.loads(files.dumps({keys.LOSS: math.inf, keys.RATIO: -math.inf, keys.BUILDUP: 1.0})) == {
        keys.LOSS: None, keys.RATIO: None, keys.BUILDUP: 1.0}


# Files that may spell a run file's name, with how often and why. Hydra writes its own
# `.hydra/config.yaml`, which is no run file: the bad-input tests build such a folder by hand.
# "wandb" is also the package's and the module's name.
ALLOWED = {
    "experiments/runformat/run_dir.py": None,  # the one definition
    "tests/test_run_dir.py": None,  # this test (the patterns below)
    "tests/test_bad_input.py": 2,
    "experiments/engine/launcher/environment.py": 1,  # PACKAGES: the wandb package's version
    "tests/analysis/test_analysis_wandb_load.py": 1,  # 'wandb' not in sys.modules
    "tests/conftest.py": 3,  # the tests' own W&B folders, in their cache (no run directory)
    "examples/ddp_train.py": 1,  # a user's own script: its W&B folder in its --out (no run directory)
    "tests/test_ddp_example.py": 1,  # ... which the example's test reads
}
# Every fixed name, and the stems of the per-process, per-step and per-node patterns (an f-string
# such as f"error.rank{rank}.txt" starts with its stem, then a field, a digit or a glob's *). The same quote on both sides of a fixed
# name: a docstring's """env.json's ...""" is prose, not a literal.
FIXED = re.compile(r"""(["'])(%s)\1""" % "|".join(re.escape(name) for name in files.FIXED_NAMES))
STEMS = re.compile(r"""["'](%s)(?=[{*\d])""" % "|".join(re.escape(stem) for stem in files.PATTERN_STEMS))


def test_every_run_directory_name_is_in_the_module() -> None:
    assert set(files.RUN_FILES) <= set(files.FIXED_NAMES) and len(set(files.FIXED_NAMES)) == len(files.FIXED_NAMES)
    assert files.error_file_process(files.error_file(3)) == 3 and files.error_file_process(files.ENV) is None
    assert files.checkpoint_step_of(files.checkpoint_step(30)) == 30 and files.checkpoint_step_of("step-x") is None
    assert files.node_file(files.STATUS, "h-1") == "status.h-1.json" and files.node_file(files.STATUS, "") == files.STATUS
    assert Path(files.node_file(files.AGENT_REPORT, "h-1")).match(files.node_file(files.AGENT_REPORT, "*"))
    names = [files.error_file(0), files.checkpoint_step(0), files.checkpoint_process_file(0)]
    assert all(name.startswith(stem) for name, stem in zip(names, files.PATTERN_STEMS))
    assert Path(names[0]).match(files.ERROR_FILES) and Path(names[1]).match(files.CHECKPOINT_STEPS)


def test_no_run_file_name_is_spelled_outside_the_module() -> None:
    found: dict[str, list[str]] = {}
    for path in sorted(REPO.rglob("*.py")):
        relative = path.relative_to(REPO).as_posix()
        if relative.split("/")[0].startswith(".") or "/." in relative or relative.startswith("outputs/"):
            continue  # the venv, caches, run outputs
        text = path.read_text(errors="replace")
        hits = [name for _, name in FIXED.findall(text)] + STEMS.findall(text)
        if hits:
            found[relative] = hits
    unexpected = {name: hits for name, hits in found.items()
                  if name not in ALLOWED or (ALLOWED[name] is not None and len(hits) != ALLOWED[name])}
    assert not unexpected, f"name run files through experiments/runformat/run_dir.py (CONFIG, error_file, ...): {unexpected}"
    assert "experiments/runformat/run_dir.py" in found  # the patterns do match the one definition
