"""One run, one number everywhere: a tiny real run's headline numbers read the same in its
summary.json, in its report row (analysis.stats.run_stats and the quickstart table's cells) and in
the summary block the terminal printed, at the printed precision.

log_every=3: the summary used to average every step while the report averaged the logged ones,
so with unlogged steps the two disagreed (issue 11); now both reduce the logged rows."""
from __future__ import annotations

from pathlib import Path

import pytest

from analysis.load import load_runs
from analysis.report_tables import summary_cells
from analysis.stats import STATS, run_stats, summarize
from experiments.runformat.headline import reduce_run
from experiments.engine.rank.report import summary_lines
from experiments.runformat import run_dir as run_files
from tests.conftest import run_cli

pytestmark = pytest.mark.slow

RUN = ["dataset=digits", "model=mlp", "logger=local", "logger.log_every=3", "logger.progress=false",
       "warmup_steps=2", "max_steps=10", "workers=2", "processes=1", "sparsifier=micro"]


def printed_summary(stdout: str, metric: str) -> dict[str, str]:
    """The terminal summary's cells by key: "0.249 / 0.2418" under its label -> two keys."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("summary ("))
    cells = {}
    for label, specs in summary_lines(metric):
        (line,) = [text for text in lines[start:] if text.strip().startswith(label)]
        values = line.strip()[len(label):].strip().split(" / ")
        assert len(values) == len(specs), line
        cells.update({spec.key: value for spec, value in zip(specs, values)})
    return cells


def test_summary_report_row_and_terminal_show_the_same_numbers(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = run_cli([*RUN, f"hydra.run.dir={run_dir}"], env={"WANDB_MODE": "disabled"})
    assert result.returncode == 0, result.stderr[-3000:]
    summary = run_files.read_json(run_dir / run_files.SUMMARY)
    metric = summary["task"]["metric"]
    printed = printed_summary(result.stdout, metric)

    # summary.json is the reference reduction of what metrics.jsonl holds (steps 0, 3, 6, 9)
    records = run_files.read_metrics(run_dir / run_files.METRICS)
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == [0, 3, 6, 9]
    expected = reduce_run(train, [r for r in records if r["kind"] == "eval"], warmup_steps=2)
    for key, value in expected.items():
        assert summary[key] == pytest.approx(value, rel=1e-12), key

    stats = run_stats(load_runs(run_dir, cache=False))
    assert len(stats) == 1
    row = stats.iloc[0]
    cells = summary_cells(summarize(stats)).iloc[0]
    by_key = {spec.key: (stat, spec) for stat, spec in STATS.items()}
    compared = 0
    for key, text in printed.items():
        if key == metric:
            spec = summary_lines(metric)[0][1][0]
            assert text == spec.format(summary[key]) == spec.format(row["metric"]) == cells[spec.title]
            compared += 1
            continue
        stat, spec = by_key[key]
        assert text == spec.format(summary[key]), key  # terminal == summary.json
        assert text == spec.fmt.format(row[stat]), key  # == the report row (run_stats is scaled)
        if spec.title in cells:
            assert text == cells[spec.title], key  # == the quickstart table's cell
        compared += 1
    assert compared >= 10 and "density/error_settled" in printed


def test_a_skipped_last_step_is_reduced_alike_in_summary_and_report(tmp_path: Path) -> None:
    """on_nonfinite=skip with the last step (9, a logging step) skipped and an lr that changes
    every step (warm-up): summary.json reduces the skipped row too, so its train/lr is step 9's,
    as the report's reduction of metrics.jsonl says."""
    run_dir = tmp_path / "run"
    result = run_cli([*RUN[:-1], "sparsifier=topk", "schedule=warmup_step", "on_nonfinite=skip",
                      "sparsifier._target_=tests.helpers.fault_injection.NaNGradientTopK",
                      "+sparsifier.nan_rank=1", "+sparsifier.nan_step=9", f"hydra.run.dir={run_dir}"],
                     env={"WANDB_MODE": "disabled"})
    assert result.returncode == 0, result.stderr[-3000:]
    summary = run_files.read_json(run_dir / run_files.SUMMARY)
    records = run_files.read_metrics(run_dir / run_files.METRICS)
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == [0, 3, 6, 9] and train[-1]["train/skipped"] == 1.0
    expected = reduce_run(train, [r for r in records if r["kind"] == "eval"], warmup_steps=2)
    assert {key: summary.get(key) for key in expected} == pytest.approx(expected, rel=1e-12)
    assert summary["train/lr"] == train[-1]["train/lr"] != train[-2]["train/lr"]
    row = run_stats(load_runs(run_dir, cache=False)).iloc[0]
    assert row["skipped_steps"] == 1 and row["density_error_settled"] == pytest.approx(summary["density/error_settled"])
