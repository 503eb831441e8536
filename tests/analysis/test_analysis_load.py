"""Loading run directories: discovery, damaged and failed runs, the cache, odd metric files."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from analysis.columns import KEYS
from analysis.discover import find_run_dirs
from analysis.load import load_runs
from analysis import metrics_io
from analysis.metrics_io import CACHE_DIR
from analysis.synthetic import SyntheticRun, write_run
from experiments.runformat import metric_keys as keys
from experiments.runformat import run_dir as run_files


def _train_lines(path: Path) -> list[dict]:
    rows = []
    for line in path.read_text().splitlines(keepends=True):
        if line.endswith("\n"):
            row = json.loads(line)
            if row.get("kind") == "train":
                rows.append(row)
    return rows


def test_discovery_skips_hydra_folders_and_nested_paths(synthetic: Path) -> None:
    hydra = synthetic / "sweep" / "0_dense_w2_s0" / ".hydra"
    hydra.mkdir(exist_ok=True)
    (hydra / run_files.CONFIG).write_text("workers: 2\n")
    found = find_run_dirs([synthetic, synthetic / "sweep"])
    assert len(found) == 6 * 3 * 2 + 2
    assert not any(".hydra" in str(path) for path in found)


def test_every_table_carries_the_key_columns(synthetic: Path) -> None:
    tables = load_runs(synthetic)
    for frame in (tables.runs, tables.steps, tables.epochs):
        assert set(KEYS) <= set(frame.columns)
    assert set(tables.steps["method"].unique()) == {"dense", "topk", "micro", "exdyna", "deft", "dgc"}
    assert len(tables.steps) == tables.runs["train_rows"].sum()


def test_failed_and_killed_runs_are_listed_with_complete_lines_kept(synthetic: Path) -> None:
    runs = load_runs(synthetic).runs.set_index("name")
    assert runs.loc["failed", "status"] == "failed"
    assert "synthetic failure" in runs.loc["failed", "error"]
    killed = runs.loc["killed"]
    assert killed["status"] == "running" and killed["metrics_cut"]
    assert killed["train_rows"] == len(_train_lines(synthetic / "killed" / run_files.METRICS)) == 10


@pytest.mark.slow
def test_real_killed_run_keeps_its_complete_lines(damaged: Path) -> None:
    tables = load_runs(damaged)
    killed = tables.runs.set_index("name").loc["killed_dense"]
    assert killed["status"] == "running" and killed["metrics_cut"]
    assert killed["train_rows"] == len(_train_lines(damaged / "killed_dense" / run_files.METRICS)) == 5
    assert tables.runs.set_index("name").loc["failed_topk", "status"] == "failed"


def test_a_run_without_status_or_metrics_still_appears(tmp_path: Path) -> None:
    run = tmp_path / "early"
    run.mkdir()
    (run / run_files.CONFIG).write_text("sparsifier: {name: topk, density: 0.01}\nworkers: 4\nseed: 0\n")
    (run / run_files.ENV).write_text("{}")
    tables = load_runs(tmp_path)
    assert tables.runs["status"].tolist() == ["missing"]
    assert tables.runs["train_rows"].tolist() == [0]
    assert tables.steps.empty


def test_cache_is_used_and_refreshed_when_the_file_grows(tmp_path: Path, monkeypatch) -> None:
    """The second load is served by the cache (the JSON-lines parser is not called: a cache that
    can never be read would silently fall back to it); after the file grows, it is parsed again."""
    run = write_run(tmp_path / "run", SyntheticRun("topk", 2, steps=20, epochs=2))
    first = load_runs(tmp_path)
    assert len(list((run / CACHE_DIR).iterdir())) == 1
    parses: list[int] = []
    parse = metrics_io.parse_jsonl

    def counted_parse(data: bytes):
        parses.append(len(data))
        return parse(data)

    monkeypatch.setattr(metrics_io, "parse_jsonl", counted_parse)
    again = load_runs(tmp_path)
    assert parses == []  # served by the cache
    assert again.steps.drop(columns="after_warmup").equals(first.steps.drop(columns="after_warmup"))
    time.sleep(0.01)
    with open(run / run_files.METRICS, "a") as handle:
        handle.write(run_files.dumps({keys.ROW_STEP: 99, keys.ROW_KIND: keys.KIND_TRAIN, keys.DENSITY_ACTUAL: 0.5}) + "\n")
    grown = load_runs(tmp_path)
    assert parses == [(run / run_files.METRICS).stat().st_size]  # the grown file, parsed once
    assert len(grown.steps) == len(first.steps) + 1
    assert len(list((run / CACHE_DIR).iterdir())) == 1  # the stale copy is gone
    load_runs(tmp_path)
    assert len(parses) == 1  # and the refreshed cache serves the next load
    assert load_runs(tmp_path, cache=False).steps.shape == grown.steps.shape


def test_corrupt_line_and_changing_types_fall_back_to_the_forgiving_reader(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", SyntheticRun("topk", 2, steps=6, epochs=1))
    lines = (run / run_files.METRICS).read_text().splitlines()
    lines.insert(2, '{"step": 1, "kind": "tra')  # a complete but broken line in the middle
    lines.append(run_files.dumps({keys.ROW_STEP: 7, keys.ROW_KIND: keys.KIND_TRAIN, keys.THRESHOLD: "adaptive"}))
    lines.append(run_files.dumps({keys.ROW_STEP: 8, keys.ROW_KIND: keys.KIND_TRAIN, keys.THRESHOLD: 0.5}))
    (run / run_files.METRICS).write_text("\n".join(lines) + "\n")
    tables = load_runs(tmp_path, cache=False)
    assert tables.runs.loc[0, "bad_lines"] == 1
    assert tables.runs.loc[0, "train_rows"] == 6 + 2


def test_select_keeps_rows_of_the_chosen_runs(synthetic: Path) -> None:
    tables = load_runs(synthetic).select(status="done", sparsifier=["micro", "exdyna"], workers=4)
    assert set(tables.runs["sparsifier"]) == {"micro", "exdyna"}
    assert set(tables.steps["run_id"]) == set(tables.runs["run_id"])
    assert set(tables.epochs["workers"]) == {4}


def test_variants_of_one_sparsifier_get_their_own_method_label(tmp_path: Path) -> None:
    for exchange in ("union_allreduce", "sparse_allgather"):
        run = write_run(tmp_path / exchange, SyntheticRun("topk", 2, steps=4, epochs=1))
        config = (run / run_files.CONFIG).read_text().replace("name: topk", f"name: topk\n  exchange: {exchange}")
        (run / run_files.CONFIG).write_text(config)
    methods = set(load_runs(tmp_path).runs["method"])
    assert methods == {"topk(exchange=union_allreduce)", "topk(exchange=sparse_allgather)"}


def test_missing_path_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such"):
        load_runs(tmp_path / "absent")


def test_environment_variable_names_the_runs(synthetic: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from analysis.load import default_run_paths

    monkeypatch.setenv("SPARSEBENCH_RUNS", os.pathsep.join([str(synthetic / "failed"), str(synthetic / "killed")]))
    assert len(load_runs(default_run_paths()).runs) == 2


def test_report_on_a_folder_without_runs_fails_cleanly(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from analysis.report import main

    assert main([str(tmp_path)]) == 2
    assert "no run directories" in capsys.readouterr().err
    assert not (tmp_path / "report").exists()
