"""`make compare` (experiments/studies/compare): one tiny battery shared by the checks, run for
real (`--quick`: the bundled digits, W = 2 and 4, 420 statistics steps, the quick selection
replay) on Top-k, the worked example's partitioned top-k and a cheater that sends its top-2k,
with the references the verdicts need (dense, MiCRO)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from analysis import scorecard
from experiments.studies.compare.__main__ import main
from experiments.studies.compare.battery import QUICK, Scale, applicable_workers
from sparsifiers import registry
from tests.conftest import REPO
from tests.helpers import fixture_methods
from tests.helpers.scorecard_check import accuracy_gap, selection_slope, statistics_measures

METHODS = ("partitioned_topk", "top2k", "topk")


def compare(out, conf, *methods: str) -> subprocess.CompletedProcess:
    search = fixture_methods.write_conf(conf)
    env = {**os.environ, "WANDB_MODE": "disabled", registry.EXTRA_METHODS: fixture_methods.__name__}
    result = subprocess.run([sys.executable, "-m", "experiments.studies.compare", "--quick", "--method", ",".join(methods),
                             "--out", str(out), search], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def battery(tmp_path_factory):
    out, conf = tmp_path_factory.mktemp("compare"), tmp_path_factory.mktemp("conf")
    first = compare(out, conf, *METHODS)
    records = {path.stem: json.loads(path.read_text()) for path in (out / "records").glob("*.json")}
    return out, conf, first.stdout, records


def verdict(records: dict, method: str, prop: str) -> tuple[str, float]:
    one = records[method]["measures"][prop]
    return one["verdict"], one["value"]


@pytest.mark.slow
def test_the_cheater_fails_traffic_and_density_with_its_numbers(battery):
    _, _, _, records = battery
    assert verdict(records, "top2k", "traffic") == ("DOES_NOT_HOLD", 2.0)  # 2 k indices per rank, exactly
    outcome, error = verdict(records, "top2k", "density")
    assert outcome == "DOES_NOT_HOLD" and error > 1.0  # |U| >= 2 k: an error of at least +1
    measured = records["top2k"]["measures"]["traffic"]["claim"]["measured"]
    assert [numbers["k_max/k@W=4"] for numbers in measured.values()] == [2.0]
    # Top-k sends exactly k, but its union builds up: traffic holds, build-up and density do not.
    assert verdict(records, "topk", "traffic") == ("HOLDS", 1.0)
    assert verdict(records, "topk", "buildup")[0] == verdict(records, "topk", "density")[0] == "DOES_NOT_HOLD"
    # The worked example: disjoint top-(k/W) selections, |U| = W floor(k/W) ~ k, equal counts.
    for prop in ("buildup", "density", "traffic", "balance"):
        assert verdict(records, "partitioned_topk", prop)[0] == "HOLDS", records["partitioned_topk"]["measures"][prop]["text"]
    ranks = {method: records[method]["measures"]["traffic"]["rank"] for method in METHODS}
    assert ranks["partitioned_topk"] < ranks["topk"] < ranks["top2k"] == records["top2k"]["measures"]["traffic"]["of"]


@pytest.mark.slow
def test_every_scorecard_number_is_computed_again_from_the_run_records(battery):
    out, _, _, records = battery
    recomputed = {}
    for method in (*METHODS, "micro"):
        recomputed[method] = {**statistics_measures(out, method), "selection": selection_slope(out, method),
                              "accuracy": accuracy_gap(out, method)}
    recomputed["micro"]["balance"] = math.nan  # MiCRO is the balance reference: not applicable
    for method, values in recomputed.items():
        for prop, value in values.items():
            shown = records[method]["measures"][prop]["value"]
            assert (shown is None and math.isnan(value)) or shown == pytest.approx(value, rel=1e-9, abs=1e-12), (method, prop)
            ranked = sorted(v[prop] for v in recomputed.values() if not math.isnan(v[prop]))
            rank = None if math.isnan(value) else ranked.index(value) + 1
            assert records[method]["measures"][prop]["rank"] == rank, (method, prop)
    page = (out / "scorecards" / "top2k.md").read_text()
    assert "| largest indices per rank / k (settled) | 2 | 4 of 4 | DOES_NOT_HOLD |" in page


@pytest.mark.slow
def test_a_second_call_reruns_nothing_and_says_what_is_not_built(battery):
    out, conf, _, records = battery
    again = compare(out, conf, "topk").stdout
    assert "run 1/" not in again and "0 to run" in again and "selection, topk: already done, reused" in again
    assert records["topk"]["not_built"]["pays"]["verdict"] == "NOT_MEASURABLE"
    assert records["dense"]["measures"]["traffic"]["text"].startswith("NOT_MEASURABLE: not applicable, because dense")


def test_an_unknown_method_is_refused_before_anything_runs(tmp_path, capsys):
    """A name the registry does not know, no name, or a bad override: one line naming it, exit 2,
    and no folder written."""
    assert main(["--method", "topk,no_such", "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert "'no_such' is not a registered method" in error and "the known methods: dense" in error
    assert main(["--method", ",", "--out", str(tmp_path / "out")]) == 2
    assert "--method names no method" in capsys.readouterr().err
    assert main(["--method", "topk", "--out", str(tmp_path / "out"), "sparsifier.density=2"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: --method topk: ") and "density" in error
    assert not (tmp_path / "out").exists()


def test_a_worker_count_the_method_refuses_is_left_out_and_said(tmp_path):
    """The worked example refuses k < W (its constructor's ConfigError): at density 0.0001 of the
    digits MLP (k = 8) W = 16 is not applicable, with run.py's own message, and W = 2 runs."""
    with fixture_methods.registered(tmp_path) as search:
        scale = Scale(statistics_workers=(2, 16), statistics_args=QUICK.statistics_args)
        accepted, refused = applicable_workers("partitioned_topk", scale, ("sparsifier.density=0.0001", search))
    assert accepted == [2]
    assert list(refused) == ["statistics at W=16"]
    assert "gives k = 8 < workers = 16: raise sparsifier.density" in refused["statistics at W=16"]
    record = {"method": "partitioned_topk", "title": "partitioned top-k", "field": ["partitioned_topk"], "source": {},
              "measures": {}, "not_built": {}, "not_applicable": refused}
    assert f"- **statistics at W=16**: not applicable, because {refused['statistics at W=16']}" in scorecard.page(record)
