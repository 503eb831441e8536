"""`make compare` (experiments/studies/compare): one tiny battery shared by the checks, run for
real (`--quick`: the bundled digits, W = 2 and 4, 420 statistics steps, the quick selection
replay, the quickstart study's per-step runs at W = 2) on the worked example's partitioned top-k
and a cheater that sends its top-2k, with the references the verdicts need (dense, MiCRO); a second
call for the worked example reruns nothing and publishes the leaderboard into the test's own folder.
(Top-k stays out: a third method's battery costs the suite 35 s and tests nothing the two do not;
its generic verdicts are judged on the synthetic study, tests/analysis/test_generic_claims.py.)"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
from matplotlib.colors import to_hex

from analysis import measured, scorecard
from analysis.figures.scorecard import HIGHLIGHT, measure_figure, measured as measured_bars
from experiments.runformat import run_dir as run_files
from experiments.studies.compare.__main__ import main
from experiments.studies.compare.battery import QUICK, Scale, applicable_workers
from experiments.studies.compare.pays import STEP
from sparsifiers import registry
from tests.conftest import REPO
from tests.helpers import fixture_methods
from tests.helpers.scorecard_check import accuracy_gap, best_lows, selection_slope, statistics_measures

METHODS = ("partitioned_topk", "top2k")


def compare(out, conf, *methods: str, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    search = fixture_methods.write_conf(conf)
    env = {**os.environ, "WANDB_MODE": "disabled", registry.EXTRA_METHODS: fixture_methods.__name__}
    result = subprocess.run([sys.executable, "-m", "experiments.studies.compare", "--quick", "--method", ",".join(methods),
                             "--out", str(out), *extra, search], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def battery(tmp_path_factory):
    out, conf = tmp_path_factory.mktemp("compare"), tmp_path_factory.mktemp("conf")
    first = compare(out, conf, *METHODS)
    records = {path.stem: json.loads(path.read_text()) for path in (out / "records").glob("*.json")}
    return out, conf, first.stdout, records


@pytest.fixture(scope="module")
def again(battery, tmp_path_factory):
    """The same call for the worked example alone, publishing the leaderboard into a folder of the
    test's own."""
    out, conf, _, _ = battery
    pages = tmp_path_factory.mktemp("pages")
    return compare(out, conf, "partitioned_topk", extra=("--publish", "--pages", str(pages))).stdout, pages


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
    # The worked example: disjoint top-(k/W) selections, |U| = W floor(k/W) ~ k, equal counts.
    for prop in ("buildup", "density", "traffic", "balance"):
        assert verdict(records, "partitioned_topk", prop)[0] == "HOLDS", records["partitioned_topk"]["measures"][prop]["text"]
    ranks = {method: records[method]["measures"]["traffic"]["rank"] for method in METHODS}
    assert ranks["partitioned_topk"] < ranks["top2k"] == records["top2k"]["measures"]["traffic"]["of"]


@pytest.mark.slow
def test_every_scorecard_number_is_computed_again_from_the_run_records(battery):
    out, conf, _, records = battery
    recomputed = {}
    with fixture_methods.registered(conf) as search:
        lows = best_lows(out, search)
    for method in (*METHODS, "micro"):
        recomputed[method] = {**statistics_measures(out, method), "selection": selection_slope(out, method),
                              "accuracy": accuracy_gap(out, method), "pays": lows.get(method, math.nan)}
    recomputed["micro"]["balance"] = math.nan  # MiCRO is the balance reference: not applicable
    for method, values in recomputed.items():
        for prop, value in values.items():
            shown = records[method]["measures"][prop]["value"]
            assert (shown is None and math.isnan(value)) or shown == pytest.approx(value, rel=1e-9, abs=1e-12), (method, prop)
            ranked = sorted((v[prop] for v in recomputed.values() if not math.isnan(v[prop])), reverse=prop == "pays")
            rank = None if math.isnan(value) else ranked.index(value) + 1
            assert records[method]["measures"][prop]["rank"] == rank, (method, prop)
    page = (out / "scorecards" / "top2k.md").read_text()
    assert "| largest indices per rank / k (settled) | 2 | 3 of 3 | DOES_NOT_HOLD |" in page


@pytest.mark.slow
def test_every_method_is_priced_by_the_end_to_end_model(battery):
    """The per-step part: each selecting method's statistics runs of the (quick) end-to-end study
    beside its dense baselines, priced on the three default H200 clusters at W = 4 to 1,024. The
    quickstart CNN's step is launch-bound compute that no sparsifier shortens: nothing pays."""
    out, _, _, records = battery
    for method in (*METHODS, "micro"):
        one = records[method]["measures"]["pays"]
        (numbers,) = one["claim"]["measured"].values()
        assert numbers["cells"] == 3 * 9 and one["verdict"] == ("HOLDS" if numbers["best low"] > 1 else "DOES_NOT_HOLD")
        assert one["value"] == numbers["best low"] <= numbers["break-even"]
    assert records["dense"]["measures"]["pays"]["text"].startswith("NOT_MEASURABLE: not applicable, because dense is a dense baseline")
    assert sorted(path.name for path in (out / "quickstart").iterdir()) == sorted(
        ["base", STEP, *(f"statistics_{method}" for method in (*METHODS, "micro"))])


@pytest.mark.slow
def test_a_second_call_reruns_nothing(battery, again):
    """Every part of the first call is in the study's ledger with its seconds (schedule.py), so the
    second starts no run and composes no sweep's jobs again."""
    out, _, _, records = battery
    printed, _ = again
    assert "run 1/" not in printed and "python run.py -m" not in printed
    assert "7 sweeps already done here" in printed and "selection, partitioned_topk: already done, reused" in printed
    ledger = json.loads((out / "parts.json").read_text())
    parts = sorted((entry["method"], entry["part"]) for entry in ledger["parts"].values())
    assert parts == sorted([("dense", "convergence"), ("dense baselines", "per-step baselines"),
                            *((method, part) for method in (*METHODS, "micro") for part in ("statistics", "per-step", "convergence")),
                            *((method, "selection") for method in METHODS), ("micro", "selection, steered")])
    assert all(entry["seconds"] > 0 for entry in ledger["parts"].values()) and ledger["wall_s"] > 0
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
              "measures": {}, "not_applicable": refused}
    assert f"- **statistics at W=16**: not applicable, because {refused['statistics at W=16']}" in scorecard.page(record)


@pytest.mark.slow
def test_the_leaderboard_covers_every_registered_method_and_renders_again_from_its_json(battery, again):
    """--publish: docs/measured/leaderboard.md and .html (here in the test's folder), every cell
    its record's, every registered method a row or named as not run, every cell's runs listed
    and present, the header's commit and machine; analysis.measured renders both pages again."""
    out, conf, _, records = battery
    _, pages = again
    assert measured.check(pages) == []
    record = json.loads((pages / "leaderboard.json").read_text())
    board = record["data"]
    with fixture_methods.registered(conf):
        assert sorted([row["method"] for row in board["rows"]] + board["not_run"]) == sorted(registry.names())
    assert {row["method"] for row in board["rows"]} == {*METHODS, "dense", "micro"}
    for row in board["rows"]:
        for prop, cell in row["cells"].items():
            one = records[row["method"]]["measures"][prop]
            assert cell == {key: one[key] for key in ("value", "rank", "of", "verdict")}, (row["method"], prop)
            if cell["value"] is not None:  # measured: its part's runs are listed, and there
                part = board["measures"][prop]["part"]
                assert row["runs"][part] and all((out / run / run_files.SUMMARY).is_file() for run in row["runs"][part])
    text = (pages / "leaderboard.md").read_text()
    assert f"at commit `{record['provenance']['commit']}`" in text and record["provenance"]["machine"] in text
    assert "| `top2k` |" in text and "2 (#3, fails)" in text  # the cheater's traffic: last of three (MiCRO's beside)
    html = (pages / "leaderboard.html").read_text()
    assert html.count("<tr><td>") == len(board["rows"]) and "addEventListener('click'" in html
    (pages / "leaderboard.html").write_text(html.replace("fails", "holds"))
    assert measured.check(pages) == ["leaderboard.html: differs from what leaderboard.json renders (publish it again)"]


@pytest.mark.slow
def test_each_scorecard_shows_a_figure_per_measure_with_its_method_highlighted(battery):
    out, _, _, records = battery
    record = records["top2k"]
    page = (out / "scorecards" / "top2k.md").read_text()
    assert set(record["figures"]) == {prop for prop in scorecard.MEASURES
                                      if any(one["measures"][prop]["value"] is not None for one in records.values())}
    for name in record["figures"].values():
        assert (out / "scorecards" / name).is_file() and f"]({name})" in page
    # the traffic bars: every measured method's value, the best at the top, the cheater's alone highlighted
    bars = measure_figure(records, "traffic", "top2k").axes[0].patches
    shown = measured_bars(records, "traffic")[::-1]
    assert [bar.get_width() for bar in bars] == [value for _, value in shown]
    highlighted = [name for (name, _), bar in zip(shown, bars) if to_hex(bar.get_facecolor()) == to_hex(HIGHLIGHT)]
    assert highlighted == ["top2k"] and shown[0][0] == "top2k"  # the worst traffic, at the bottom
