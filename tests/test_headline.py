"""The headline-metric registry and its one reduction rule: the rule on hand-made values, and the
streaming SummaryAccumulator (summary.json) against the reference reduce_run on the same rows."""
from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pytest

from analysis.report_tables import SHOWN
from analysis.stats import STATS
from experiments.runformat.headline import HEADLINES, Reduction, headline, reduce_logged, reduce_run, task_metric
from experiments.runformat import metric_keys as keys
from experiments.runformat import run_dir as run_files
from experiments.engine.core.skip import SkipGuard, SkippedStep
from experiments.engine.rank.report import format_summary
from experiments.engine.rank.skipped import log_skipped
from experiments.engine.rank.summary import SummaryAccumulator


def test_the_rule_on_values() -> None:
    values = [5.0, 1.0, 2.0, 3.0, 10.0]
    late = [False, False, True, True, True]
    assert reduce_logged(Reduction.MEDIAN_AFTER_WARMUP, values, late) == 3.0  # of 2, 3, 10
    assert reduce_logged(Reduction.MEDIAN_AFTER_WARMUP, values, [False] * 5) == 3.0  # none late: all five
    assert reduce_logged(Reduction.MEDIAN_AFTER_WARMUP, [9.0, 1.0, 2.0], [False] * 3) == 2.0
    assert reduce_logged(Reduction.MEAN, values) == pytest.approx(4.2)
    assert reduce_logged(Reduction.MEAN_ABS, [-1.0, 3.0]) == 2.0
    # the later half: the last ceil(n/2) values (n = 5: the last 3; n = 4: the last 2)
    assert reduce_logged(Reduction.MEAN_LATER_HALF, values) == pytest.approx(5.0)
    assert reduce_logged(Reduction.MEAN_LATER_HALF, values[:4]) == pytest.approx(2.5)
    # the last evaluation is the number even when it is not finite: never an earlier one's value
    assert math.isnan(reduce_logged(Reduction.LAST_EVAL, [0.5, 0.7, float("nan")]))
    assert math.isnan(reduce_logged(Reduction.LAST_EVAL, [0.5, float("inf")]))
    assert reduce_logged(Reduction.LAST_EVAL, [float("nan"), 0.7]) == 0.7
    assert reduce_logged(Reduction.MEAN, [1.0, float("nan"), 3.0]) == 2.0
    # infinity is missing, as metrics.jsonl's null reads back: the same number from the file
    assert reduce_logged(Reduction.MEAN, [1.0, float("inf")]) == 1.0
    assert reduce_logged(Reduction.LAST, [1.0, float("-inf")]) == 1.0
    assert math.isnan(reduce_logged(Reduction.MEAN, []))


def _rows(count: int, seed: int = 0) -> list[dict]:
    """Logged train rows as the runner writes them, every third lacking density (a skipped step's
    row has none) and steps 3 apart (log_every=3)."""
    rng = np.random.default_rng(seed)
    rows = []
    for index in range(count):
        row = {"step": 3 * index, "time/select_ms_max": float(rng.random()), "traffic/sent_bytes_max": float(rng.random() * 1e5),
               "train/loss": float(rng.random())}
        if index % 3 != 2:
            row.update({"density/error": float(rng.normal()), "density/actual": float(rng.random()), "buildup": 1.5})
        rows.append(row)
    return rows


@pytest.mark.parametrize("count", [1, 2, 7, 8])
def test_summary_json_is_the_reference_reduction_of_the_logged_rows(count: int) -> None:
    rows = _rows(count)
    evals = [{"step": 2, "epoch": 0, "eval/accuracy": 0.5}, {"step": 5, "epoch": 1, "eval/accuracy": 0.6}]
    accumulator = SummaryAccumulator(warmup_steps=6)
    for row in rows:
        accumulator.add_step(row, np.array([1.0, 2.0]))
        accumulator.add_logged(row["step"], row)
    for row in evals:
        accumulator.add_eval(row)
    summary = accumulator.summary()
    expected = reduce_run(rows, evals, warmup_steps=6)
    assert summary.pop("traffic/sent_bytes_total_max") == 2.0 * count  # summed over every step, not a headline
    assert summary == pytest.approx(expected)
    # spelled out once: settled = the later half of the rows that have a density error
    errors = [row["density/error"] for row in rows if "density/error" in row]
    assert summary["density/error_settled"] == pytest.approx(statistics.fmean(errors[len(errors) // 2:]))
    assert summary["density/abs_error"] == pytest.approx(statistics.fmean(abs(e) for e in errors))
    timed = [row["time/select_ms_max"] for row in rows if row["step"] >= 6] or [row["time/select_ms_max"] for row in rows]
    assert summary["time/select_ms_max"] == pytest.approx(statistics.median(timed))
    assert summary["eval/accuracy"] == 0.6


def test_every_reported_column_is_a_registry_entry() -> None:
    assert set(SHOWN) <= set(STATS)
    columns = [spec.stat for spec in HEADLINES.values() if spec.stat]
    assert len(columns) == len(set(columns))  # STATS is keyed by column: two entries must not share one
    for spec in HEADLINES.values():
        assert spec.reduce is not Reduction.LAST_EVAL and spec.format(1.0) != "-"
    assert headline("eval/perplexity") == task_metric("eval/perplexity")
    assert task_metric("eval/perplexity").title == "perplexity (lower is better)"
    assert HEADLINES["traffic/sent_bytes_max"].format(12345.0) == "0.0123"  # bytes shown as MB
    assert "|U|/k-1" in HEADLINES["density/error"].title


class _Rows:
    """A sink that keeps what is logged, as metrics.jsonl would hold it."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def log(self, row: dict, step: int) -> None:
        self.rows.append({**row, "step": step})


def test_a_skipped_last_row_reaches_summary_json_as_it_reaches_the_report() -> None:
    """on_nonfinite=skip: the last logged row is a skipped step's (train/lr, no density); the
    summary must reduce it as the report does (train/lr is its lr, not the row before's)."""
    sink, accumulator = _Rows(), SummaryAccumulator(warmup_steps=0)
    for row in _rows(4):
        row[keys.LR] = 0.1 * (1 + row["step"])
        accumulator.add_step(row, np.array([1.0]))
        accumulator.add_logged(row["step"], row)
        sink.log({"kind": "train", **row}, row["step"])
    guard = SkipGuard(max_in_a_row=3)
    guard.count(SkippedStep(12, 1, "gradient"))
    log_skipped(sink, accumulator, guard, SkippedStep(12, 1, "gradient"), hosts_rank_zero=False,
                fields={"epoch": 0, keys.LR: 1.3, keys.ELAPSED: 1.0})
    summary = accumulator.summary()
    summary.pop(keys.SENT_TOTAL_MAX)
    assert summary == pytest.approx(reduce_run(sink.rows, [], warmup_steps=0))
    assert summary[keys.LR] == 1.3 and sink.rows[-1][keys.SKIPPED] == 1.0


def test_non_finite_values_read_the_same_from_summary_json_and_from_metrics_jsonl() -> None:
    """An infinite density error and a NaN last evaluation: metrics.jsonl writes both as null;
    the accumulator maps them alike, so summary.json (no NaN/Infinity tokens) equals the
    reference reduction of the rows read back from the file, and the last evaluation stays
    missing instead of showing epoch 0's value."""
    rows = _rows(4)
    rows[1]["density/error"] = float("inf")
    evals = [{"kind": "eval", "step": 2, "epoch": 0, "eval/accuracy": 0.5},
             {"kind": "eval", "step": 5, "epoch": 1, "eval/accuracy": float("nan")}]
    accumulator = SummaryAccumulator(warmup_steps=0)
    for row in rows:
        accumulator.add_logged(row["step"], row)
    for row in evals:
        accumulator.add_eval(row)
    text = run_files.json_text(accumulator.summary())
    written = json.loads(text, parse_constant=lambda token: pytest.fail(f"{token} in summary.json"))
    assert written["eval/accuracy"] is None and "density/error" in written
    read_back = [json.loads(line) for line in run_files.metrics_text([*rows, *evals]).splitlines()]
    expected = reduce_run([r for r in read_back if "kind" not in r], [r for r in read_back if "kind" in r], 0)
    assert math.isnan(expected.pop("eval/accuracy")) and written.pop("eval/accuracy") is None
    assert written == pytest.approx(expected)
    finite = [row["density/error"] for row in rows if math.isfinite(row.get("density/error", math.nan))]
    assert written["density/error"] == pytest.approx(statistics.fmean(finite))
    printed = format_summary({**written, "eval/accuracy": None, "task": {"metric": "eval/accuracy"}}, "run")
    (line,) = [text for text in printed.splitlines() if "(last evaluation)" in text]
    assert line.split("(last evaluation)")[1].split()[:2] == ["-", "(last"] and "non-finite" in line
