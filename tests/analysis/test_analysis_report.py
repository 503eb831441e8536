"""`python -m analysis.report` on the tiny real sweep plus a failed and a killed copy: its numbers
against the metrics files recomputed here with json and statistics, and its run listing."""
from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from analysis.figures import FIGURES
from experiments.runformat import run_dir as run_files

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def recompute(run_dir: Path) -> dict[str, float]:
    """The report's per-run numbers, straight from metrics.jsonl and config.yaml."""
    warmup = yaml.safe_load((run_dir / run_files.CONFIG).read_text())["warmup_steps"]
    rows = [json.loads(line) for line in (run_dir / run_files.METRICS).read_text().splitlines(keepends=True) if line.endswith("\n")]
    train = [row for row in rows if row["kind"] == "train"]
    evals = [row for row in rows if row["kind"] == "eval"]
    timed = [row for row in train if row["step"] >= warmup] or train

    def mean(key: str) -> float:
        return statistics.fmean(row[key] for row in train)

    return {
        "metric": max(evals, key=lambda row: (row["step"], row["epoch"]))["eval/accuracy"],
        "select_ms_max": statistics.median(row["time/select_ms_max"] for row in timed),
        "select_ms_mean": statistics.median(row["time/select_ms_mean"] for row in timed),
        "mb_sent": mean("traffic/sent_bytes_max") / 1e6,
        "traffic_ratio": mean("traffic/ratio"),
        "density_error": mean("density/error"),
        "abs_density_error": statistics.fmean(abs(row["density/error"]) for row in train),
        "density_actual": mean("density/actual"),
        "density_target": mean("density/target"),
        # the later half of the logged rows: the last ceil(n/2)
        "density_error_settled": statistics.fmean(row["density/error"] for row in train[len(train) // 2:]),
        "buildup": mean("buildup"),
        "load_imbalance": mean("selection/load_imbalance"),
    }


def markdown_rows(text: str, section: str) -> list[dict[str, str]]:
    """The table under the `## section` heading of report.md, as dicts."""
    body = text.split(f"## {section}")[1].split("\n## ")[0]
    lines = [line for line in body.splitlines() if line.startswith("|")]

    def cells(line: str) -> list[str]:  # on unescaped pipes: "error \|U\|/k-1" is one cell
        return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line.strip()[1:-1])]

    header = cells(lines[0])
    return [dict(zip(header, cells(line))) for line in lines[2:]]


@pytest.fixture(scope="module")
def report(sweep: Path, damaged: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("report")
    env = {**os.environ, "MPLCONFIGDIR": str(out / ".mpl")}
    result = subprocess.run(
        [sys.executable, "-m", "analysis.report", str(sweep), str(damaged), "--out", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return out, result.stdout


def test_summary_numbers_match_the_metrics_files(report: tuple[Path, str], sweep: Path) -> None:
    out, _ = report
    summary = pd.read_csv(out / "summary.csv")
    shown = markdown_rows((out / "report.md").read_text(), "Summary per method and worker count")
    assert len(summary) == len(shown) == 4  # the failed and killed copies are not averaged in
    for run_dir in sorted(path for path in sweep.iterdir() if (path / run_files.STATUS).exists()):
        config = yaml.safe_load((run_dir / run_files.CONFIG).read_text())
        method, workers = config["sparsifier"]["name"], config["workers"]
        row = summary[(summary["method"] == method) & (summary["workers"] == workers)]
        assert len(row) == 1 and row["runs"].item() == 1
        expected = recompute(run_dir)
        for key, value in expected.items():
            assert row[key].item() == pytest.approx(value, rel=1e-9, abs=1e-12), (method, workers, key)
        (cells,) = [r for r in shown if r["method"] == method and r["W"] == str(workers)]
        assert row["task_metric"].item() == "eval/accuracy"
        assert cells["accuracy"] == f"{expected['metric']:.2%}"
        assert cells["build-up"] == f"{expected['buildup']:.3f}"
        assert cells["MB sent/rank/step"] == f"{expected['mb_sent']:.4f}"
        assert cells["error |U|/k-1"] == f"{expected['density_error']:+.3f}"
        assert cells["settled error"] == f"{expected['density_error_settled']:+.3f}"
        assert cells["density target"] == f"{expected['density_target']:.5f}"


def test_failed_and_killed_runs_are_listed(report: tuple[Path, str]) -> None:
    out, stdout = report
    listed = {row["run"]: row for row in markdown_rows((out / "report.md").read_text(), "Failed, unfinished, diverged and non-finite runs")}
    assert listed["failed_topk"]["status"] == "failed" and "injected" in listed["failed_topk"]["note"]
    assert listed["killed_dense"]["status"] == "running" and "cut mid-write" in listed["killed_dense"]["note"]
    assert listed["killed_dense"]["train rows"] == "5"
    runs = pd.read_csv(out / "runs.csv")
    assert sorted(runs["status"]) == ["done"] * 4 + ["failed", "running"]
    assert "failed_topk" in stdout and "killed_dense" in stdout


# What a real dense + top-k sweep feeds: no threshold, MiCRO/ExDyna, DEFT or DGC run, so the
# density, load-imbalance, partition, DEFT-unit and DGC-ablation figures have no data.
DRAWN_FOR_THE_SWEEP = {"method_comparison", "selection_time_vs_workers", "buildup_density_vs_workers",
                       "compression_error", "step_time_breakdown", "task_metric_curves", "residual_norm"}


def test_report_prints_the_summary_and_links_every_figure(report: tuple[Path, str]) -> None:
    out, stdout = report
    assert "accuracy" in stdout.splitlines()[0] and "topk" in stdout
    text = (out / "report.md").read_text()
    assert DRAWN_FOR_THE_SWEEP < FIGURES.keys()
    for name, (_, caption) in FIGURES.items():
        png = out / f"{name}.png"
        section = text.split(f"### {caption}")[1].split("###")[0]
        if name in DRAWN_FOR_THE_SWEEP:
            assert f"]({name}.png)" in section and "no data" not in section, name
            assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n"), name
        else:
            assert "no data" in section and not png.exists(), name
