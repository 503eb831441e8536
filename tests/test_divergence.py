"""Diverged runs are named (experiments/runformat/divergence.py): the rule's edges, then a real run
whose loss blows up, next to a healthy one, as summary.json, the terminal summary, the report and
the claims read them."""
from __future__ import annotations

import math

import pytest

from analysis.claims import Outcome, judge_paths
from analysis.report import write_report
from experiments.runformat import metric_keys as keys
from experiments.runformat import run_dir as run_files
from experiments.runformat.divergence import LOSS_FACTOR, LOSS_ROWS, describe, diverged, fell_to_chance, loss_blew_up
from tests.conftest import run_cli


def losses(values: list[float | None]) -> list[tuple[int, float | None]]:
    return [(10 * row, value) for row, value in enumerate(values)]


def test_four_rows_over_three_times_the_first_loss_are_not_a_divergence():
    assert loss_blew_up(losses([2.0, 1.5, 7.0, 8.0, 9.0, 10.0, 1.0])) is None


def test_five_rows_in_a_row_over_three_times_the_first_loss_are():
    found = loss_blew_up(losses([2.0, 1.5, 7.0, 8.0, 9.0, 10.0, 31.6]))
    assert found["at_step"] == 20  # the first row of the five
    assert f"over {LOSS_FACTOR:g} times its first logged value (2)" in found["why"]
    assert f"{LOSS_ROWS} logged rows in a row from step 20" in found["why"] and "reached 31.6" in found["why"]


def test_a_row_back_below_starts_the_count_again_and_exactly_three_times_is_not_over():
    assert loss_blew_up(losses([2.0, 7.0, 7.0, 7.0, 7.0, 5.0, 7.0, 7.0, 7.0, 7.0])) is None
    assert loss_blew_up(losses([2.0, 6.0, 6.0, 6.0, 6.0, 6.0, 6.0])) is None


def test_rows_without_a_loss_are_passed_over_and_a_non_positive_start_gives_no_scale():
    assert loss_blew_up(losses([None, 2.0, 7.0, None, 7.0, math.nan, 7.0, 7.0, 7.0]))["at_step"] == 20
    assert loss_blew_up(losses([0.0, 7.0, 7.0, 7.0, 7.0, 7.0])) is None
    assert loss_blew_up([]) is None


def test_accuracy_that_learned_and_fell_back_to_chance_is_a_divergence():
    evaluations = [(100, 0.6), (200, 0.85), (300, 0.11)]
    found = fell_to_chance(evaluations, classes=10)
    assert found["at_step"] == 300 and "fell to chance: 0.11" in found["why"] and "1/10 + 0.01" in found["why"]
    assert diverged(losses([2.3, 2.0, 1.0]), evaluations, classes=10) == found


def test_accuracy_that_never_left_chance_or_recovered_is_not():
    assert fell_to_chance([(100, 0.10), (200, 0.105)], classes=10) is None  # never learned: not diverged
    assert fell_to_chance([(100, 0.6), (200, 0.1), (300, 0.5)], classes=10) is None  # ended above chance
    assert fell_to_chance([(100, 0.6), (200, 0.1)], classes=None) is None  # no class count: loss rule only


def test_the_loss_rule_comes_first_and_describe_reads_either():
    found = diverged(losses([2.0, 9.0, 9.0, 9.0, 9.0, 9.0]), [(10, 0.9), (60, 0.1)], classes=10)
    assert found["at_step"] == 10 and "training loss" in found["why"]
    assert describe(found).startswith("diverged at step 10: training loss")
    assert describe(None) == "" and diverged([]) is None


# A huge lr on the bundled digits: the loss goes from 2.3 to thousands within 10 steps, finite
# throughout (lr 30 reaches NaN, which fails the run instead: experiments/engine/core/finite.py).
TINY = ["dataset=digits", "model=mlp", "logger=local", "logger.log_every=1", "logger.progress=false",
        "max_steps=10", "workers=2", "processes=1", "sparsifier=topk"]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("divergence")
    printed = {}
    for name, lr in (("diverged", 5.0), ("healthy", 0.05)):
        result = run_cli([*TINY, f"optimizer.lr={lr}", f"hydra.run.dir={root / name}"], env={"WANDB_MODE": "disabled"})
        assert result.returncode == 0, result.stderr[-3000:]
        printed[name] = result.stdout
    return root, printed


@pytest.mark.slow
def test_a_run_whose_loss_blows_up_says_so_in_summary_json_and_the_terminal(two_runs):
    root, printed = two_runs
    found = run_files.read_json(root / "diverged" / run_files.SUMMARY)[keys.DIVERGED]
    assert found and found["at_step"] > 0 and "training loss over 3 times" in found["why"]
    assert f"DIVERGED at step {found['at_step']}: " in printed["diverged"]
    assert run_files.read_json(root / "healthy" / run_files.SUMMARY)[keys.DIVERGED] is None
    assert "DIVERGED" not in printed["healthy"]


@pytest.mark.slow
def test_the_report_lists_the_diverged_run_instead_of_averaging_its_accuracy(two_runs, tmp_path):
    root, _ = two_runs
    write_report([root], tmp_path / "report", cache=False)
    report = (tmp_path / "report" / "report.md").read_text()
    summary, problems = report.split("## Failed, unfinished, diverged and non-finite runs")
    assert summary.count("| topk |") == 1  # the healthy run's row only
    assert "| diverged | topk | 2 | done |" in problems and "diverged at step" in problems
    assert "healthy" not in problems.split("\n## ")[0]


@pytest.mark.slow
def test_the_claims_leave_the_diverged_run_out_and_name_it(two_runs):
    root, _ = two_runs
    verdicts, study = judge_paths([root], cache=False)
    assert len(study.runs) == 1 and len(study.diverged) == 1
    buildup = {v.claim.id: v for v in verdicts}["buildup.topk"]
    assert buildup.outcome is Outcome.NOT_MEASURABLE
    assert "diverged, left out: topk W=2 seed" in buildup.reason and "diverged at step" in buildup.reason
    named = {v.claim.id for v in verdicts if "diverged, left out" in v.reason}
    assert {"selection.topk", "buildup.topk"} <= named  # the claims that read Top-k's runs name it
    assert not named & {"selection.micro", "density.micro", "traffic.bound.oktopk"}  # the others do not
