"""analysis.claims: a synthetic study on which every claim holds, then, per claim, the same study
with the one change that breaks that claim (tests/helpers/claims_study.py): it must come out
DOES_NOT_HOLD, and every other claim must keep its verdict. Studies lacking what a claim needs
give NOT_MEASURABLE with the reason, never an error; the command line writes claims.md and
claims.json and exits 2 for a path without runs."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from analysis.claims import BY_ID, CLAIMS, Outcome, Verdict, judge_paths, judge_tables
from analysis.claims.__main__ import main as claims_main
from analysis.claims.output import brief_table, brief_text, claim_records
from analysis.claims.deft import lpt_bound, replay_deviation
from analysis.synthetic import SyntheticRun, write_run, write_sweep
from experiments.runformat import metric_keys as k
from sparsifiers.common.deft_allocation import allocate, bin_loads, unit_k
from tests.helpers.claims_study import (ALSO_BREAKS, BREAKS, METHODS, on, set_train, shift_error, study_tables, tilt_bytes,
                                        tilt_error, write_study)

REPO = Path(__file__).resolve().parents[2]
SCALING = ["selection.deft", "selection.micro", "selection.exdyna", "selection.topk", "selection.cltk",
           "buildup.topk", "traffic.count.deft", "traffic.count.micro", "traffic.count.exdyna",
           "traffic.bytes.deft", "traffic.bytes.micro", "traffic.bytes.exdyna", "traffic.bound.oktopk",
           *(f"traffic.{kind}.settled.{m}" for kind in ("count", "bytes") for m in ("deft", "micro", "exdyna"))]
SETTLED = ["density.micro", "density.exdyna", "density.threshold", "density.sage", "balance.exdyna", "traffic.bound.oktopk",
           *(f"traffic.{kind}.settled.{m}" for kind in ("count", "bytes") for m in ("deft", "micro", "exdyna"))]
AGAINST_DENSE = ["convergence.dense.deft", "convergence.dense.micro", "convergence.dense.exdyna", "dgc.dense"]
SOONER = ["convergence.sooner.deft", "convergence.sooner.micro", "convergence.sooner.exdyna"]


def judged(path: Path) -> dict[str, Verdict]:
    verdicts, _ = judge_paths([path], cache=False)
    return {verdict.claim.id: verdict for verdict in verdicts}


def outcomes(verdicts: dict[str, Verdict]) -> dict[str, Outcome]:
    return {claim_id: verdict.outcome for claim_id, verdict in verdicts.items()}


@pytest.fixture(scope="module")
def all_hold(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Verdict]]:
    root = write_study(tmp_path_factory.mktemp("all_hold"))
    return root, judged(root)


def test_every_claim_holds_on_the_all_hold_study(all_hold):
    _, verdicts = all_hold
    assert list(verdicts) == [claim.id for claim in CLAIMS]
    assert {claim_id: v.outcome for claim_id, v in verdicts.items() if v.outcome is not Outcome.HOLDS} == {}
    for verdict in verdicts.values():  # measured numbers always come with the verdict
        assert verdict.measured and all(verdict.held.values()) and verdict.reason == ""


def test_every_claim_has_a_break():
    assert set(BREAKS) == set(BY_ID)


def test_breaks_in_memory_judge_as_the_written_study(all_hold, tmp_path):
    """study_tables (the breaks below) gives the numbers load_runs gives for the same runs."""
    root, written = all_hold
    unbroken, _ = judge_tables(study_tables(root, lambda method, workers, rows: None))
    assert {v.claim.id: v.measured for v in unbroken} == {claim_id: v.measured for claim_id, v in written.items()}
    broken = BREAKS["deft.bins_balanced"]
    from_disk = judged(write_study(tmp_path, broken))["deft.bins_balanced"]
    in_memory = {v.claim.id: v for v in judge_tables(study_tables(root, broken))[0]}["deft.bins_balanced"]
    assert from_disk.outcome is in_memory.outcome is Outcome.DOES_NOT_HOLD
    assert from_disk.measured == in_memory.measured


@pytest.mark.parametrize("claim_id", list(BREAKS))
def test_the_break_of_a_claim_fails_that_claim_and_no_other(claim_id, all_hold):
    root, before = all_hold
    verdicts, _ = judge_tables(study_tables(root, BREAKS[claim_id]))
    after = {verdict.claim.id: verdict for verdict in verdicts}
    assert after[claim_id].outcome is Outcome.DOES_NOT_HOLD, after[claim_id]
    assert not all(after[claim_id].held.values())
    changed = {other: (before[other].outcome, after[other].outcome) for other in BY_ID
               if other != claim_id and after[other].outcome is not before[other].outcome}
    assert changed == {other: (Outcome.HOLDS, Outcome.DOES_NOT_HOLD) for other in ALSO_BREAKS.get(claim_id, ())}


def test_one_worker_count_leaves_the_scaling_claims_unmeasurable(tmp_path):
    verdicts = judged(write_study(tmp_path, workers=(4,)))
    for claim_id in SCALING:
        assert verdicts[claim_id].outcome is Outcome.NOT_MEASURABLE, claim_id
        assert "two or more worker counts" in verdicts[claim_id].reason and "W=[4]" in verdicts[claim_id].reason
        assert verdicts[claim_id].measured == {}
    assert {c for c, o in outcomes(verdicts).items() if o is not Outcome.HOLDS} == set(SCALING)


def test_short_runs_have_no_settled_steps(tmp_path):
    verdicts = judged(write_study(tmp_path, rows=12))  # steps 0 to 132: the later half starts at step 72
    for claim_id in SETTLED:
        assert verdicts[claim_id].outcome is Outcome.NOT_MEASURABLE, claim_id
    assert "no settled steps" in verdicts["density.micro"].reason
    assert "holds 6 rows from step 72" in verdicts["density.micro"].reason
    assert {c for c, o in outcomes(verdicts).items() if o is not Outcome.HOLDS} == set(SETTLED)


def _earlier_half(rows):
    train = [row for row in rows if row[k.ROW_KIND] == k.KIND_TRAIN]
    return train[: len(train) // 2]


@pytest.mark.parametrize("method", ["micro", "exdyna"])
def test_a_start_up_transient_fails_the_present_traffic_claims_and_not_the_settled_ones(method, all_hold):
    """MiCRO's and ExDyna's first steps selecting 10 times k at W = 4 (a threshold climbing): the
    mean over every step grows with W, the settled half (the same numbers as before) does not."""
    root, before = all_hold
    transient = on(method, shift_error(9.0, _earlier_half), only_workers=4)
    after = {v.claim.id: v for v in judge_tables(study_tables(root, transient))[0]}
    assert after[f"traffic.count.{method}"].outcome is Outcome.DOES_NOT_HOLD
    settled = after[f"traffic.count.settled.{method}"]
    assert settled.outcome is Outcome.HOLDS
    assert settled.measured == before[f"traffic.count.settled.{method}"].measured


@pytest.mark.parametrize("kind, tilt", [("count", tilt_error(0.5)), ("bytes", tilt_bytes(0.6))])
def test_settled_traffic_growing_with_w_fails_the_settled_claim_and_not_the_present_one(kind, tilt, all_hold):
    """DEFT's later half 1.5 k (1.6 times the bytes) at W = 4, its earlier half lowered as much:
    the mean over every step is as before, so only the settled variant sees the growth."""
    root, before = all_hold
    after = {v.claim.id: v for v in judge_tables(study_tables(root, on("deft", tilt, only_workers=4)))[0]}
    deft = "deft | mlp/synthetic | d=0.01"
    present = after[f"traffic.{kind}.deft"]
    assert present.outcome is Outcome.HOLDS
    assert present.measured[deft] == pytest.approx(before[f"traffic.{kind}.deft"].measured[deft])
    settled = after[f"traffic.{kind}.settled.deft"]
    assert settled.outcome is Outcome.DOES_NOT_HOLD and settled.measured[deft]["ratio"] > 1.45


def test_a_worker_count_without_settled_steps_is_left_out_and_named(tmp_path):
    """W = 8's runs log density and traffic on their first 20 rows only: their later half (10
    rows from step 120) is not settled, so the settled claims judge W = 2 and 4 and name W = 8."""
    def stop_logging(workers, rows):
        for row in [row for row in rows if row[k.ROW_KIND] == k.KIND_TRAIN][20:]:
            for key in (k.DENSITY_ERROR, k.DENSITY_ACTUAL, k.SENT_MEAN):
                row.pop(key)
    breaks = lambda method, workers, rows: stop_logging(workers, rows) if workers == 8 else None
    verdicts = judged(write_study(tmp_path, breaks, workers=(2, 4, 8), methods=("deft", "micro")))
    for claim_id in ("traffic.count.settled.micro", "traffic.bytes.settled.deft"):
        verdict = verdicts[claim_id]
        assert verdict.outcome is Outcome.HOLDS, verdict
        assert "W=[8] left out: no settled steps" in verdict.reason
        assert not any("W=8" in name for numbers in verdict.measured.values() for name in numbers)
    assert "W=8" in " ".join(verdicts["traffic.count.micro"].measured["micro | mlp/synthetic | d=0.01"])


def _blow_up(workers, rows):
    """The loss ten times its first value (2.0) from the sixth train row (step 60) on."""
    for row in [row for row in rows if row[k.ROW_KIND] == k.KIND_TRAIN][5:]:
        row[k.LOSS] = 20.0


def test_runs_that_diverged_are_left_out_and_named_never_judged(all_hold):
    """Every MiCRO run's loss ten times its first value from its sixth row on: diverged
    (experiments/runformat/divergence.py). Its claims that are not about convergence are
    NOT_MEASURABLE with the runs named, never judged on their numbers; its convergence claims fail
    on them; claims that do not read MiCRO's runs keep their verdicts."""
    root, before = all_hold
    verdicts, study = judge_tables(study_tables(root, on("micro", _blow_up)))
    after = {verdict.claim.id: verdict for verdict in verdicts}
    assert len(study.diverged) == 2 and set(study.diverged["sparsifier"]) == {"micro"}
    for claim_id in ("convergence.dense.micro", "convergence.sooner.micro"):
        assert after[claim_id].outcome is Outcome.DOES_NOT_HOLD, claim_id
        assert list(after[claim_id].held) == [f"micro | mlp/synthetic | d=0.01 | W={w} | seed 0" for w in (2, 4)]
        assert "diverged" not in after[claim_id].reason.replace("that did not diverge", "")  # named in its numbers
    for claim_id in [c for c in BY_ID if "micro" in c.split(".") and not c.startswith("convergence.")]:
        assert after[claim_id].outcome is Outcome.NOT_MEASURABLE, claim_id
        assert "diverged, left out: micro W=2 seed 0: diverged at step 60: training loss" in after[claim_id].reason
    assert after["balance.exdyna"].outcome is Outcome.NOT_MEASURABLE  # ExDyna's balance is against MiCRO's
    assert "diverged, left out: micro W=2" in after["balance.exdyna"].reason
    unread = [c for c in BY_ID if "micro" not in c.split(".") and c != "balance.exdyna"]
    assert {c: after[c].outcome for c in unread} == {c: before[c].outcome for c in unread}
    assert all("diverged" not in after[c].reason for c in unread)


def test_a_claim_judged_beside_a_diverged_run_says_so_in_its_summary_row(all_hold):
    """MiCRO's W = 4 run diverged: its density claim is judged at W = 2 only, and says why."""
    root, _ = all_hold
    verdicts, _ = judge_tables(study_tables(root, on("micro", _blow_up, only_workers=4)))
    density = {verdict.claim.id: verdict for verdict in verdicts}["density.micro"]
    assert density.outcome is Outcome.HOLDS and list(density.held) == ["micro | mlp/synthetic | d=0.01 | W=2"]
    assert brief_text(density) == "1 of 1 hold; 1 diverged run(s) left out"
    assert "diverged, left out: micro W=4 seed 0: diverged at step 60" in density.reason


@pytest.mark.parametrize("claim_id", ["convergence.dense.micro", "convergence.sooner.micro"])
def test_a_diverged_run_fails_its_methods_convergence_claim(claim_id, all_hold):
    """MiCRO's W = 4 run diverged: ac091f3 left it out, and the claim held on W = 2 alone. It is
    evidence that MiCRO did not converge there: the claim fails on it, with its step and reason as
    its numbers, never an accuracy averaged from it; W = 2 is judged as before."""
    root, before = all_hold
    verdicts, _ = judge_tables(study_tables(root, on("micro", _blow_up, only_workers=4)))
    verdict = {v.claim.id: v for v in verdicts}[claim_id]
    healthy, diverged = "micro | mlp/synthetic | d=0.01 | W=2", "micro | mlp/synthetic | d=0.01 | W=4 | seed 0"
    assert verdict.outcome is Outcome.DOES_NOT_HOLD
    assert verdict.held == {healthy: True, diverged: False}
    assert verdict.measured[healthy] == before[claim_id].measured[healthy]
    assert verdict.measured[diverged]["diverged at step"] == 60
    assert verdict.measured[diverged]["why"].startswith("training loss over 3 times its first logged value (2)")
    assert verdict.reason == ""  # named in its numbers, not as left out
    assert brief_text(verdict).startswith(f"1 of 2 hold; fails: {diverged}: diverged at step=60, why=training loss")
    record = claim_records([verdict])[0]
    assert record["measured"][diverged]["diverged at step"] == 60 and record["held"][diverged] is False
    json.dumps(record, allow_nan=False)  # claims.json takes the reason as text


def test_a_diverged_run_of_dgcs_full_recipe_fails_dgc_dense(all_hold):
    """dgc.dense is a convergence claim too: a DGC run with warm-up and clipping that diverged fails it."""
    root, _ = all_hold
    verdicts, _ = judge_tables(study_tables(root, on("dgc", _blow_up, only_workers=4)))
    verdict = {v.claim.id: v for v in verdicts}["dgc.dense"]
    assert verdict.outcome is Outcome.DOES_NOT_HOLD and list(verdict.held.values()) == [True, False]
    failing = [name for name, ok in verdict.held.items() if not ok][0]
    assert "W=4 | seed 0" in failing and verdict.measured[failing]["diverged at step"] == 60


def test_a_diverged_dense_run_is_left_out_of_the_convergence_claims_and_named(all_hold):
    """Only the method's own diverged runs count against its convergence claim: dense's W = 4 run
    diverged, so W = 4 has no dense baseline and is named; W = 2 holds as before."""
    root, _ = all_hold
    verdicts, _ = judge_tables(study_tables(root, on("dense", _blow_up, only_workers=4)))
    verdict = {v.claim.id: v for v in verdicts}["convergence.dense.micro"]
    assert verdict.outcome is Outcome.HOLDS and list(verdict.held) == ["micro | mlp/synthetic | d=0.01 | W=2"]
    assert "diverged, left out: dense W=4 seed 0: diverged at step 60" in verdict.reason


def test_without_dense_runs_nothing_is_compared_with_dense(tmp_path):
    verdicts = judged(write_study(tmp_path, methods=tuple(m for m in METHODS if m != "dense")))
    for claim_id in AGAINST_DENSE:
        assert verdicts[claim_id].outcome is Outcome.NOT_MEASURABLE
        assert "no dense run at the same W" in verdicts[claim_id].reason
    assert {c for c, o in outcomes(verdicts).items() if o is not Outcome.HOLDS} == set(AGAINST_DENSE)


def test_dgc_without_clipping_is_not_the_claimed_recipe(tmp_path):
    root = write_study(tmp_path)
    for config in root.glob("*_dgc_*/config.yaml"):
        config.write_text(config.read_text().replace("clip_norm: 5.0", "clip_norm: null"))
    verdict = judged(root)["dgc.dense"]
    assert verdict.outcome is Outcome.NOT_MEASURABLE and "warm-up and clipping" in verdict.reason


def test_deft_without_per_unit_lists(tmp_path):
    def drop_lists(workers, rows):
        for row in rows:
            for key in (k.DEFT_UNIT_K, k.DEFT_UNIT_NORMS, k.DEFT_UNIT_COMMON, k.DEFT_BIN_LOADS):
                row.pop(key, None)
    verdicts = judged(write_study(tmp_path, on("deft", drop_lists)))
    assert verdicts["deft.k_follows_norms"].outcome is Outcome.NOT_MEASURABLE
    assert "log_units_every" in verdicts["deft.k_follows_norms"].reason
    assert verdicts["deft.bins_balanced"].outcome is Outcome.HOLDS


@pytest.mark.parametrize("step,outcome", [(12, Outcome.DOES_NOT_HOLD), (13, Outcome.HOLDS)])
def test_deft_k_is_checked_only_where_rank_0_led_the_plan(tmp_path, step, outcome):
    """Rank 0 logs its own k_l beside the plan's common units, which are another leader's at a
    step rank 0 did not lead (step mod W != 0): a k_l 3 above the formula fails the claim at a
    step rank 0 led (12 at W = 4), and is not evidence at one it did not (13)."""
    def off_by_three(workers, rows):
        row = next(row for row in rows if row.get(k.ROW_STEP) == 12 and row.get(k.ROW_KIND) == k.KIND_TRAIN)
        row[k.ROW_STEP] = step
        row[k.DEFT_UNIT_K] = [value + (3.0 if unit == 1 else 0.0) for unit, value in enumerate(row[k.DEFT_UNIT_K])]
    verdicts = judged(write_study(tmp_path, on("deft", off_by_three, only_workers=4)))
    assert verdicts["deft.k_follows_norms"].outcome is outcome


def test_evaluations_without_elapsed_time(tmp_path):
    def drop_elapsed(method, workers, rows):
        for row in rows:
            if row[k.ROW_KIND] == k.KIND_EVAL:
                row.pop(k.ELAPSED)
    verdicts = judged(write_study(tmp_path, drop_elapsed))
    for claim_id in SOONER:
        assert verdicts[claim_id].outcome is Outcome.NOT_MEASURABLE and k.ELAPSED in verdicts[claim_id].reason
    assert {c for c, o in outcomes(verdicts).items() if o is not Outcome.HOLDS} == set(SOONER)


def test_contexts_are_judged_apart(tmp_path):
    """Two models in one study: each claim measures each context on its own, and a break in one
    context fails the claim with that context's subject named."""
    write_study(tmp_path / "mlp")
    write_study(tmp_path / "cnn", BREAKS["density.micro"], model="cnn")
    verdicts = judged(tmp_path)
    assert sorted(verdicts["selection.deft"].measured) == ["deft | cnn/synthetic | d=0.01", "deft | mlp/synthetic | d=0.01"]
    density = verdicts["density.micro"]
    assert density.outcome is Outcome.DOES_NOT_HOLD
    assert {s for s, held in density.held.items() if not held} == {f"micro | cnn/synthetic | d=0.01 | W={w}" for w in (2, 4)}
    assert {c for c, o in outcomes(verdicts).items() if o is not Outcome.HOLDS} == {"density.micro"}


def test_a_claim_is_judged_on_the_runs_of_its_own_experiment(tmp_path):
    """A study of two sweeps: a replay tagged laptop/selection_replay in which every claim holds,
    and a statistics sweep tagged laptop/statistics on another model whose selection time does not
    fall with W. The selection claims judge only the replay, the per-step claims only the
    statistics sweep, and each verdict says which runs it judged; without tags, every claim judges
    every run and the flat selection time fails the selection claim."""
    tagged, untagged = tmp_path / "tagged", tmp_path / "untagged"
    write_study(tagged / "timing", tag="laptop/selection_replay")
    flat = on("micro", set_train(k.SELECT_MAX, 8.0))
    write_study(tagged / "statistics", flat, model="cnn", tag="laptop/statistics")
    verdicts = judged(tagged)
    runs = len(METHODS) * 2
    micro = verdicts["selection.micro"]
    assert micro.outcome is Outcome.HOLDS
    assert list(micro.measured) == ["micro | mlp/synthetic | d=0.01"]
    assert micro.scope == f"judged on the {runs} runs tagged laptop/selection_replay"
    topk = verdicts["buildup.topk"]
    assert list(topk.measured) == ["topk | cnn/synthetic | d=0.01"]
    assert topk.scope == f"judged on the {runs} runs tagged laptop/statistics"
    assert verdicts["convergence.dense.micro"].scope == ""  # no convergence sweep: every run
    write_study(untagged / "timing")
    write_study(untagged / "statistics", flat, model="cnn")
    untagged_verdicts = judged(untagged)
    assert untagged_verdicts["selection.micro"].outcome is Outcome.DOES_NOT_HOLD and untagged_verdicts["selection.micro"].scope == ""
    assert len(untagged_verdicts["buildup.topk"].measured) == 2  # both contexts


def test_a_study_with_nothing_to_judge(tmp_path):
    """Dense runs, a failed run and a running one: every claim NOT_MEASURABLE with a reason."""
    write_study(tmp_path / "dense", methods=("dense",))
    write_run(tmp_path / "failed", SyntheticRun(method="micro", workers=2, status="failed"))
    write_run(tmp_path / "running", SyntheticRun(method="deft", workers=4, status="running", cut=True))
    verdicts, study = judge_paths([tmp_path], cache=False)
    assert study.left_out == 2 and len(study.runs) == 2
    for verdict in verdicts:
        assert verdict.outcome is Outcome.NOT_MEASURABLE and verdict.reason, verdict.claim.id
    reasons = {verdict.claim.id: verdict.reason for verdict in verdicts}
    assert reasons["selection.micro"] == "no finished MiCRO runs"  # the failed one is left out
    assert reasons["buildup.deft"] == "no finished DEFT runs at W >= 2"  # the running one too
    assert reasons["dgc.dense"] == "no finished DGC runs"


def test_a_plausible_random_study_is_judged_without_error(tmp_path):
    """The generic synthetic runs (analysis.synthetic: every method, noisy numbers, DEFT lists
    that do not follow the formula) give a verdict for every claim."""
    write_sweep(tmp_path, ["dense", "topk", "cltk", "deft", "micro", "exdyna", "threshold", "sage", "dgc", "gaussiank", "randomk"],
                [1, 2, 4], steps=30, epochs=3)
    verdicts, _ = judge_paths([tmp_path], cache=False)
    assert [v.claim.id for v in verdicts] == [claim.id for claim in CLAIMS]
    assert all(isinstance(v.outcome, Outcome) for v in verdicts)


def test_every_criterion_refuses_missing_numbers(all_hold):
    _, verdicts = all_hold
    for claim_id, verdict in verdicts.items():
        for numbers in verdict.measured.values():
            assert not BY_ID[claim_id].holds({key: math.nan for key in numbers}), claim_id


def test_the_k_formula_replay_agrees_with_the_allocation_code():
    rng = np.random.default_rng(0)
    for _ in range(300):
        units = int(rng.integers(2, 40))
        sizes = [int(s) for s in rng.integers(1, 5_000, units)]
        norms = [float(n) for n in np.exp(rng.normal(0, rng.uniform(0.1, 3), units))]
        k_target = int(rng.integers(1, sum(sizes)))
        ks = unit_k(norms, sizes, k_target)
        common = [1.0 if count == size else 0.0 for count, size in zip(ks, sizes)]
        assert replay_deviation(norms, ks, common, k_target) == 0
    assert replay_deviation([1.0, 1.0], [10.0, 0.0], [0.0, 0.0], 10) == 5  # 10 and 0 instead of 5 and 5


def test_the_bin_bound_is_what_largest_first_packing_guarantees():
    """Against max(largest cost, total / W), as DEFT logs it: never above 2W/(W+1), and W+1 equal
    units reach it."""
    rng = np.random.default_rng(1)
    for _ in range(500):
        workers = int(rng.integers(1, 17))
        costs = [float(c) for c in np.exp(rng.normal(0, 1.5, int(rng.integers(1, 40))))]
        loads = bin_loads(allocate(costs, [], workers), costs)
        assert max(loads) / max(max(costs), sum(costs) / workers) <= lpt_bound(workers) + 1e-12
    for workers in (2, 4, 8):
        loads = bin_loads(allocate([1.0] * (workers + 1), [], workers), [1.0] * (workers + 1))
        assert max(loads) / ((workers + 1) / workers) == pytest.approx(lpt_bound(workers))


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "disabled"}
    return subprocess.run([sys.executable, "-m", "analysis.claims", *args, "--no-cache"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_command_line_writes_claims_md_and_json(all_hold, tmp_path):
    root, _ = all_hold
    result = run_cli(str(root), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert f"{len(CLAIMS)} HOLDS, 0 DOES_NOT_HOLD, 0 NOT_MEASURABLE" in result.stdout
    lines = (tmp_path / "out" / "claims.md").read_text().splitlines()
    summary = next(i for i, line in enumerate(lines) if line.startswith("| claim |"))
    assert lines[summary] == "| claim | verdict | measured |"
    assert [row.split("`")[1] for row in lines[summary + 2:summary + 2 + len(CLAIMS)]] == [claim.id for claim in CLAIMS]
    header = next(i for i, line in enumerate(lines) if line.startswith("| claim | source"))
    assert lines[header] == "| claim | source | measured | criterion | verdict |"
    rows = [line for line in lines[header + 2:] if line.startswith("| ")]
    assert [row.split("`")[1] for row in rows] == [claim.id for claim in CLAIMS]
    assert all(row.endswith("| HOLDS |") for row in rows)
    micro = next(row for row in rows if row.startswith("| `density.micro`"))
    assert "micro \\| mlp/synthetic \\| d=0.01 \\| W=2: settled=" in micro and "\\|settled error\\| <= 0.1" in micro
    record = json.loads((tmp_path / "out" / "claims.json").read_text())
    assert [c["id"] for c in record["claims"]] == [claim.id for claim in CLAIMS]
    assert record["claims"][0]["measured"]["deft | mlp/synthetic | d=0.01"]["slope"] == pytest.approx(-1.0)


def test_the_summary_counts_the_subjects_that_hold_and_names_the_failing(all_hold, tmp_path):
    _, verdicts = all_hold
    assert brief_text(verdicts["buildup.micro"]) == "1 of 1 hold"
    broken = judged(write_study(tmp_path, BREAKS["density.micro"]))["density.micro"]
    text = brief_text(broken)
    assert text.startswith(f"0 of {len(broken.held)} hold; fails: micro | mlp/synthetic | d=0.01 | W=2: settled=")
    table = brief_table([verdicts[claim.id] for claim in CLAIMS])
    assert len(table.splitlines()) == len(CLAIMS) + 2


def test_the_command_line_exits_2_for_a_path_without_runs(tmp_path, all_hold, capsys):
    """In-process (main returns the status): one line on stderr, nothing written."""
    root, _ = all_hold
    (tmp_path / "empty").mkdir()
    assert claims_main([str(root), str(tmp_path / "empty")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"error: {tmp_path / 'empty'} holds no runs"]
    assert not (root / "claims").exists()
    assert claims_main([str(tmp_path / "nowhere")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_reported_subject_is_shown_with_its_numbers_and_never_judged(all_hold):
    """Ok-Topk's released variant beside its paper variant: in the verdict's numbers and the
    summary, in no count of what holds, and a failing-size number cannot make the claim fail."""
    import dataclasses

    from analysis.claims.claim import Statistic
    from analysis.claims.judge import judge
    from analysis.claims.output import brief_table_of, claim_records
    from analysis.claims.study import Study
    from analysis.load import load_runs

    root, _ = all_hold
    statistic = Statistic({"oktopk(variant=paper)": {"worst": 0.84}}, reported={"oktopk(variant=released)": {"worst": 13.5}})
    claim = dataclasses.replace(BY_ID["traffic.bound.oktopk"], measure=lambda study: statistic, studies=())
    verdict = judge(claim, Study.of(load_runs([root], cache=False)))
    assert verdict.outcome is Outcome.HOLDS and verdict.held == {"oktopk(variant=paper)": True}
    assert verdict.measured["oktopk(variant=released)"] == {"worst": 13.5}
    expected = "1 of 1 hold; reported, not judged: oktopk(variant=released): worst=13.5"
    assert brief_text(verdict) == expected
    assert expected.replace("|", "\\|") in brief_table_of(json.loads(json.dumps(claim_records([verdict]))))
