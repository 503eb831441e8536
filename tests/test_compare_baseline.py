"""The baseline study of make compare (experiments/studies/compare/baseline.py): its folder keyed
on the commit, the CPU and the GPUs, the methods it runs, its time estimated from the measured
per-part costs before anything runs (a stopped study's from its ledger, schedule.py), and which
methods' replays settle first."""
from __future__ import annotations

import pytest

from experiments.studies.compare import baseline
from experiments.studies.compare.__main__ import main
from experiments.studies.compare.baseline import ESTIMATE_S, battery_of, estimate_s, keyed_folder, study_key
from experiments.studies.compare.battery import LAPTOP, QUICK, Plan, Replay, selection_settle
from experiments.studies.compare.schedule import Ledger, sweep_key
from experiments.studies.reproduce.selection import DEFAULT_SETTLE, SETTLE_STEPS
from experiments.studies.reproduce.studies import Sweep
from sparsifiers import registry


def test_the_folder_is_keyed_on_the_commit_the_cpu_and_the_gpus(tmp_path, monkeypatch):
    monkeypatch.setattr(baseline, "_git", lambda *args: "0123456789abcdef0123")
    monkeypatch.setattr(baseline, "cpu_model", lambda: "Intel(R) Xeon(R) Platinum 8480+")
    assert study_key([]) == "0123456789ab_intel-r-xeon-r-platinum-8480_cpu"
    assert study_key(["NVIDIA H200", "NVIDIA H200"]) == "0123456789ab_intel-r-xeon-r-platinum-8480_nvidia-h200-nvidia-h200"
    here = keyed_folder(tmp_path)
    monkeypatch.setattr(baseline, "_git", lambda *args: "fedcba9876543210fedc")  # another commit: another folder
    assert keyed_folder(tmp_path) != here and keyed_folder(tmp_path).parent == here.parent == tmp_path


def test_the_laptop_battery_places_a_method_among_every_registered_one():
    assert battery_of(["topk"], LAPTOP) == ["topk", *(name for name in registry.names() if name != "topk")]
    assert battery_of(["topk"], QUICK) == ["topk", "dense", "micro"]  # the test suite's: the references only
    assert battery_of([], LAPTOP) == list(registry.names())  # --baseline


def _plan(method: str, out, *parts: str) -> Plan:
    """A plan by hand (plan_method would compose and validate every job): one sweep per part."""
    sweeps = [(part, Sweep(f"{part}, {method}", part, (f"sparsifier={method}",), "")) for part in parts]
    replay = Replay(method, out / "selection" / method, {"workers": (2, 4), "methods": (method,)})
    return Plan(method, sweeps, replay if registry.method(method).selects else None, {})


def test_the_estimate_prices_each_part_still_to_run_two_sweeps_at_a_time_each_replay_alone(tmp_path):
    """Dense: its convergence seeds; Top-k and DGC: statistics, the per-step runs, convergence and
    a plain replay (DGC's threshold is found afresh each step: nothing to settle); MiCRO's replay
    settles its steered threshold first; the dense baselines' per-step runs once. A part the
    ledger holds (it ended well in an earlier session) is not priced again."""
    untimed = ("statistics", "per-step", "convergence")
    plans = [_plan("dense", tmp_path, "convergence"), *(_plan(name, tmp_path, *untimed) for name in ("topk", "dgc", "micro"))]
    baselines = [("per-step baselines", Sweep("base", "resnet18/base", ("sparsifier=dense",), ""))]
    ledger = Ledger(tmp_path)
    sweeps = ESTIMATE_S["convergence"] + 3 * sum(ESTIMATE_S[part] for part in untimed) + ESTIMATE_S["per-step baselines"]
    replays = 2 * ESTIMATE_S["selection"] + ESTIMATE_S["selection, steered"]
    assert estimate_s(plans, baselines, ledger, jobs=2) == sweeps / 2 + replays
    assert estimate_s(plans, baselines, ledger, jobs=1) == sweeps + replays
    ledger.record(sweep_key(plans[3].sweeps[1][1]), "per-step", "micro", 100.0)  # MiCRO's per-step runs ended well
    ledger.record(sweep_key(baselines[0][1]), "per-step baselines", "dense baselines", 40.0)
    again = Ledger(tmp_path)  # as a later session reads it
    assert estimate_s(plans, baselines, again, jobs=2) == (sweeps - ESTIMATE_S["per-step"] - ESTIMATE_S["per-step baselines"]) / 2 + replays
    assert again.parts[sweep_key(baselines[0][1])] == {"part": "per-step baselines", "method": "dense baselines", "seconds": 40.0}


def test_only_a_steered_threshold_settles_before_its_selection_is_timed():
    """The replay settles MiCRO and ExDyna as make reproduce does (400 steps), SAGE as long (its
    threshold is steered too), and DGC, hard threshold, Gaussian-k, SIDCo and Top-k only the few
    steps that fill their residuals."""
    settle = {name: selection_settle(name)[name] for name in registry.names(selects=True)}
    assert {name for name, steps in settle.items() if steps == max(SETTLE_STEPS.values())} == set(registry.names(steered=True))
    assert settle["dgc"] == settle["topk"] == DEFAULT_SETTLE < settle["sage"] == settle["micro"] == 400


def test_baseline_and_method_are_one_or_the_other(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "out")]) == 2
    assert "give --method NAME[,NAME...] or --baseline" in capsys.readouterr().err
    assert main(["--baseline", "--method", "topk", "--out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()


def test_a_failure_names_its_log_relative_to_the_study_folder(tmp_path):
    """A baseline study's folder is copied into place elsewhere (docs/compare.md): its ledger's
    reasons must not point into the folder it ran in."""
    out = tmp_path / "study"
    out.mkdir()
    Ledger(out).record("statistics: ...", "statistics", "randomk", 24.0,
                       f"statistics, randomk failed (exit 1): its log is {out / 'statistics' / 'run.log'}")
    assert Ledger(out).failures() == ["statistics, randomk: statistics, randomk failed (exit 1): its log is statistics/run.log"]
