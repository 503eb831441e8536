"""The baseline study of make compare (experiments/studies/compare/baseline.py): its folder keyed
on the commit, the CPU and the GPUs, the methods it runs, and its time estimated from the measured
per-part costs before anything runs."""
from __future__ import annotations

import json

import pytest

from experiments.studies.compare import baseline
from experiments.studies.compare.__main__ import main
from experiments.studies.compare.baseline import ESTIMATE_S, battery_of, estimate_s, keyed_folder, study_key
from experiments.studies.compare.battery import LAPTOP, QUICK
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


def test_the_estimate_prices_each_part_a_method_still_needs(tmp_path):
    """Dense: its convergence seeds; Top-k: statistics, the per-step runs, its selection replay and
    convergence; MiCRO's replay settles its threshold first; the dense baselines' per-step runs
    once; a method with a record is reused, and so are the baselines' runs once there."""
    selecting = sum(ESTIMATE_S[part] for part in ("statistics", "per-step", "convergence"))
    by_hand = ESTIMATE_S["convergence"] + 2 * selecting + ESTIMATE_S["selection"] + ESTIMATE_S["selection, thresholded"]
    assert estimate_s(["dense", "topk", "micro"], tmp_path) == by_hand + ESTIMATE_S["per-step baselines"]
    (tmp_path / "resnet18" / "base").mkdir(parents=True)
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "micro.json").write_text(json.dumps({}))
    assert estimate_s(["dense", "topk", "micro"], tmp_path) == by_hand - sum(
        ESTIMATE_S[part] for part in ("statistics", "per-step", "convergence", "selection, thresholded"))


def test_baseline_and_method_are_one_or_the_other(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "out")]) == 2
    assert "give --method NAME[,NAME...] or --baseline" in capsys.readouterr().err
    assert main(["--baseline", "--method", "topk", "--out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()
