"""The report's statistics: seeds averaged with their spread, warm-up rule, time at each eval."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.load import load_runs
from analysis.stats import run_stats, summarize
from analysis.timeline import elapsed_at_evals
from experiments.runformat.run_dir import METRICS

REPO = Path(__file__).resolve().parents[2]


def independent_run_numbers(run_dir: Path) -> dict[str, float]:
    """One run's numbers straight from its metrics.jsonl, without the analysis: the mean over
    the train rows of build-up and load imbalance, and the last evaluation's accuracy."""
    rows = [json.loads(line) for line in (run_dir / METRICS).read_text().splitlines()]
    train = [row for row in rows if row["kind"] == "train"]
    evals = [row for row in rows if row["kind"] == "eval"]
    return {"buildup": float(np.mean([row["buildup"] for row in train])),
            "load_imbalance": float(np.mean([row["selection/load_imbalance"] for row in train])),
            "metric": evals[-1]["eval/accuracy"]}


def test_seeds_are_averaged_with_their_std(synthetic: Path) -> None:
    """summarize() against a recomputation from the files: Top-k on 4 workers, two seeds, whose
    build-up varies per step and per seed (eval rows between the train rows)."""
    summary = summarize(run_stats(load_runs(synthetic / "sweep"))).set_index(["method", "workers"])
    assert (summary["runs"] == 2).all() and (summary["seeds"] == 2).all()
    runs = sorted((synthetic / "sweep").glob("*_topk_w4_s*"))
    assert len(runs) == 2
    per_run = [independent_run_numbers(run) for run in runs]
    for name in ("buildup", "load_imbalance", "metric"):
        values = np.array([numbers[name] for numbers in per_run])
        assert values.std() > 0, f"{name} does not vary over seeds: the spread check would be empty"
        assert summary.loc[("topk", 4), name] == pytest.approx(values.mean(), rel=1e-9)
        assert summary.loc[("topk", 4), f"{name}_std"] == pytest.approx(np.std(values, ddof=1), rel=1e-9)


def test_timings_skip_the_warm_up_unless_the_run_never_left_it(tmp_path: Path) -> None:
    from analysis.synthetic import SyntheticRun, write_run

    write_run(tmp_path / "long", SyntheticRun("topk", 2, steps=12, epochs=1))
    write_run(tmp_path / "short", SyntheticRun("topk", 4, steps=3, epochs=1))
    tables = load_runs(tmp_path)
    stats = run_stats(tables).set_index("workers")
    steps = tables.steps
    late = steps[(steps["workers"] == 2) & (steps["step"] >= 5)]["time/select_ms_max"]
    assert stats.loc[2, "select_ms_max"] == pytest.approx(late.median())
    every = steps[steps["workers"] == 4]["time/select_ms_max"]
    assert stats.loc[4, "select_ms_max"] == pytest.approx(every.median())
    assert stats.loc[2, "select_ms_max"] != pytest.approx(steps[steps["workers"] == 2]["time/select_ms_max"].median())


def test_elapsed_time_counts_the_unlogged_steps() -> None:
    steps = pd.DataFrame({"run_id": ["r"] * 3, "step": [0, 2, 4], "time/step_ms": [10.0, 20.0, 30.0]})
    epochs = pd.DataFrame({"run_id": ["r", "r"], "step": [1, 5]})
    # steps 0-1 cost 10 ms each, 2-3 cost 20, 4-5 cost 30
    assert elapsed_at_evals(steps, epochs).tolist() == pytest.approx([0.020, 0.120])
    assert elapsed_at_evals(steps, epochs, "modelled").isna().all()


def test_load_benchmark_runs() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "experiments.studies.benchmarks.load", "--runs", "6", "--steps", "20", "--repeats", "1"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "cached" in result.stdout and "runs 6" in result.stdout


def test_report_cells_show_the_spread_over_seeds(synthetic: Path) -> None:
    from analysis.report_tables import summary_cells

    stats = run_stats(load_runs(synthetic / "sweep"))
    summary = summarize(stats)
    cells = summary_cells(summary)
    row = summary.index[(summary["method"] == "micro") & (summary["workers"] == 4)][0]
    mean, std = summary.loc[row, "buildup"], summary.loc[row, "buildup_std"]
    assert cells.loc[row, "build-up"] == f"{mean:.3f} ± {std:.3f}"
    single = summary_cells(summarize(stats[stats["seed"] == 0]))
    assert "±" not in single.loc[0, "accuracy"]
