"""`make endtoend`'s model: the ledger at another W, the extrapolation rule, the overlap of DDP's
buckets, the compute profiles and the step and time-to-target arithmetic, each against numbers
worked out by hand; then the cut-down study end to end (slow)."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from experiments.engine.core.ledger import decode, encode
from experiments.engine.core.network import NetworkModel
from experiments.engine.core.ledger import Collective
from experiments.studies.endtoend import check, report
from experiments.studies.endtoend.assemble import methods_of
from experiments.studies.endtoend.compute import ComputeProfile, StepWork, ddp_buckets, exposed_exchange_s
from experiments.studies.endtoend.extrapolate import LogFit, SelectionFit, fit_statistics
from experiments.studies.endtoend.ledger import at_workers, sent_bytes_max
from experiments.studies.endtoend.model import Point, runs_on
from experiments.studies.endtoend.studies import QUICKSTART
from experiments.runformat.errors import ConfigError
from tests.conftest import REPO

UNION_LEDGER = (Collective("all_gather", 1, 4), Collective("all_gather", 718, 4), Collective("all_reduce", 2301, 4))


# -- the ledger ---------------------------------------------------------------------------------
def test_a_ledger_line_round_trips_every_kind_of_collective():
    ledger = [Collective("broadcast", 1, 8, 3), Collective("all_gather", 224, 4), Collective("all_reduce", 760, 2),
              Collective("all_to_all", 5, 4), Collective("point_to_point", 9, 4, 1, 2), Collective("tree_round", 7, 4, 2)]
    assert encode(ledger) == ("broadcast:1:8@3 all_gather:224:4 all_reduce:760:2 all_to_all:5:4 point_to_point:9:4@1>2 "
                              "tree_round:7:4@2")
    assert decode(encode(ledger)) == ledger
    with pytest.raises(ValueError, match="not a ledger token"):
        decode("all_gather:12")


def test_the_union_exchange_takes_k_max_and_u_at_the_new_w_and_keeps_the_rest():
    scaled = at_workers(UNION_LEDGER, "union_allreduce", {"k_max": 718, "union": 2301}, {"k_max": 90.4, "union": 9990.6}, 64)
    assert scaled == [Collective("all_gather", 1, 4), Collective("all_gather", 90, 4), Collective("all_reduce", 9991, 4)]


def test_a_tree_merge_ledger_takes_log2_w_rounds_of_the_same_k_pairs():
    """gTop-k's sizes are k's alone, its round count log2 W: a W = 4 run's ledger at W = 16 is
    four rounds (strides 1, 2, 4, 8) of its k pairs, then its broadcast; busiest sender: one
    message of each round it takes part in (rank 0 forwards the broadcast to 4 children)."""
    logged = (Collective("tree_round", 10, 8, 1), Collective("tree_round", 10, 8, 2), Collective("broadcast", 10, 8, 0))
    at_16 = at_workers(logged, "tree_merge", {"k_max": 10, "union": 10}, {"k_max": 10, "union": 10}, 16)
    assert at_16 == [Collective("tree_round", 10, 8, s) for s in (1, 2, 4, 8)] + [logged[-1]]
    assert at_workers(logged, "tree_merge", {"k_max": 10, "union": 10}, {"k_max": 10, "union": 10}, 4) == list(logged)
    assert sent_bytes_max(at_16, 16) == 4 * 80.0  # rank 0 sends the broadcast to ranks 1, 2, 4 and 8
    with pytest.raises(ValueError, match="power of 2 workers"):
        at_workers(logged, "tree_merge", {"k_max": 10, "union": 10}, {"k_max": 10, "union": 10}, 12)


def test_an_oktopk_ledger_takes_w_minus_1_rounds_with_its_pairs_spread_as_in_the_template():
    """Ok-Topk at W = 4 (a repartition step): its rounds' largest messages average 25 pairs, as
    many as k_max / W = 100 / 4 (spread 1); the largest owner's block is 40 of |U| / W = 30
    (spread 4/3). At W = 8 with k_max 96 and |U| 150: 7 rounds of 96 / 8 = 12 pairs, a block of
    4/3 * 150 / 8 = 25, the proposals' all-reduce W - 1 = 7 long. The busiest sender, every rank
    sending the largest: 2 * 7/8 * 56 + 7 * 4 + 7 * 96 + 7 * 4 + 8 * (8 * 25 - 25) bytes."""
    logged = (Collective("all_reduce", 3, 8), Collective("all_to_all", 1, 4), Collective("shift_round", 30, 8, 1),
              Collective("shift_round", 20, 8, 2), Collective("shift_round", 25, 8, 3), Collective("all_gather", 1, 4),
              Collective("all_gather_v", 40, 8))
    at_8 = at_workers(logged, "sparse_reduce_scatter", {"k_max": 100, "union": 120}, {"k_max": 96, "union": 150}, 8)
    assert at_8 == [Collective("all_reduce", 7, 8), Collective("all_to_all", 1, 4),
                    *(Collective("shift_round", 12, 8, s) for s in range(1, 8)), Collective("all_gather", 1, 4),
                    Collective("all_gather_v", 25, 8)]
    assert sent_bytes_max(at_8, 8) == pytest.approx(2 * 7 / 8 * 56 + 7 * 4 + 7 * 96 + 7 * 4 + 8 * (8 * 25 - 25))
    # Under reduction=rank_order the proposals are an all-gather too, before the owners' count.
    ordered = (Collective("all_gather", 3, 8), *logged[1:])
    at_8_ordered = at_workers(ordered, "sparse_reduce_scatter", {"k_max": 100, "union": 120}, {"k_max": 96, "union": 150}, 8)
    assert at_8_ordered == [Collective("all_gather", 7, 8), *at_8[1:]]
    warm_up = (Collective("all_reduce", 5000, 4),)  # a dense warm-up step stays what it was
    assert at_workers(warm_up, "sparse_reduce_scatter", {"k_max": 5000, "union": 5000}, {"k_max": 1, "union": 1}, 8) == list(warm_up)


def test_the_sparse_allgather_takes_k_max_for_indices_and_values():
    ledger = (Collective("all_gather", 1, 4), Collective("all_gather", 700, 4), Collective("all_gather", 700, 4))
    scaled = at_workers(ledger, "sparse_allgather", {"k_max": 700, "union": 2000}, {"k_max": 650, "union": 9000}, 64)
    assert [c.elements for c in scaled] == [1, 650, 650]


def test_a_leaders_plan_takes_its_fitted_length_and_its_header_stays():
    deft = (Collective("broadcast", 1, 8, 20), Collective("broadcast", 105, 4, 20), *UNION_LEDGER)
    scaled = at_workers(deft, "union_allreduce", {"k_max": 718, "union": 2301}, {"k_max": 40, "union": 700, "plan": 1032.4}, 64)
    assert [c.elements for c in scaled] == [1, 1032, 1, 40, 700]
    # DEFT's allocation grew 105 -> 1032 elements from W = 32 to 256 in the check: a line in W
    stats = fit_statistics([8, 16, 32], [700.0] * 3, [100.0, 60.0, 40.0], [1.0] * 3, numel=10_000, split=True,
                           plans=[32, 64, 128])
    assert stats.at(256)["plan"] == pytest.approx(1024)


def test_ledgers_that_do_not_depend_on_w_are_kept_whole():
    dense = (Collective("all_reduce", 71802, 2),)
    assert at_workers(dense, "dense", {"k_max": 71802, "union": 71802}, {"k_max": 1, "union": 1}, 64) == list(dense)


def test_a_ledger_that_does_not_end_as_its_exchange_is_refused():
    with pytest.raises(ValueError, match="does not end as the exchange issues it"):
        at_workers(UNION_LEDGER, "union_allreduce", {"k_max": 700, "union": 2301}, {"k_max": 1, "union": 1}, 64)


def test_bytes_sent_by_the_busiest_rank_follow_the_meters_formulas():
    # W = 8: all-gathers send (W-1) m each: 7*4 + 7*718*4 = 20,132; the all-reduce 2*7/8*2301*4 = 16,107.
    assert sent_bytes_max(list(UNION_LEDGER), 8) == pytest.approx(28 + 20104 + 16107)
    # a broadcast's root sends to ceil(log2 W) children: 3 at W = 8, of 10 elements of 4 bytes
    assert sent_bytes_max([Collective("broadcast", 10, 4, 11)], 8) == 3 * 40


# -- the extrapolation --------------------------------------------------------------------------
def test_a_power_law_is_recovered_and_measured_points_are_kept():
    workers = [2, 4, 8, 16, 32]
    fit = LogFit.fit(workers, [100 * w**0.5 for w in workers])
    assert fit.at(16) == 100 * 16**0.5  # hosted: the measured value itself
    assert fit.at(1024) == pytest.approx(100 * 1024**0.5, rel=1e-9)


def test_beyond_the_hosted_range_a_curve_that_turns_back_is_held():
    # log v = -(log2 W - 5)^2 peaks at W = 32 (v = 1), then falls: a union may not shrink as W grows
    workers = [2, 4, 8, 16]
    fit = LogFit.fit(workers, [math.exp(-(math.log2(w) - 5) ** 2) for w in workers])
    assert fit.at(32) == pytest.approx(1.0)
    assert fit.at(1024) == pytest.approx(1.0)  # held at the peak, not exp(-25)


def test_a_split_methods_busiest_rank_follows_u_over_w_times_the_imbalance():
    # |U| constant 1000, imbalance r = W k_max / |U| = W ** 0.25 (a power law): at W = 64, r = 2.83
    workers = [2, 4, 8, 16, 32]
    stats = fit_statistics(workers, [1000.0] * 5, [1000 / w * w**0.25 for w in workers], [1.0] * 5,
                           numel=100_000, split=True)
    assert stats.at(64)["union"] == pytest.approx(1000)
    assert stats.at(64)["k_max"] == pytest.approx(1000 / 64 * 64**0.25)
    assert stats.at(8)["k_max"] == 1000 / 8 * 8**0.25  # hosted: measured


def test_a_split_methods_union_beyond_the_hosted_w_is_the_mean_of_its_level():
    # MiCRO's and ExDyna's threshold sets |U|, not W: the hosted W are samples of one level, and a
    # curve through their noise (here falling from 8,000 at W = 8) must not carry on falling
    unions = [7302.0, 8105.0, 7227.0, 7300.0]
    stats = fit_statistics([4, 8, 16, 32], unions, [2000.0, 1700.0, 1100.0, 850.0], [1.0] * 4, numel=71_802, split=True)
    assert stats.at(16)["union"] == 7227.0  # hosted: as measured
    assert stats.at(256)["union"] == stats.at(1024)["union"] == pytest.approx(sum(unions) / 4)
    assert LogFit.fit([4, 8, 16, 32], unions).at(256) < 0.9 * sum(unions) / 4  # what the quadratic would say


def test_a_whole_vector_methods_count_is_its_median_and_the_union_stays_below_n():
    stats = fit_statistics([2, 4, 8], [200.0, 390.0, 760.0], [100.0, 100.0, 101.0], [5.0, 6.0, 5.5],
                           numel=1000, split=False)
    assert stats.at(1024)["k_max"] == 100.0
    assert stats.at(1024)["union"] == 1000  # the fit doubles per doubling; N bounds it
    assert stats.at(1024)["select_ms"] == 5.5  # whole-vector work: the median


def test_split_selection_time_is_fitted_as_a_plus_b_over_w():
    fit = SelectionFit.fit([2, 4, 8], [1 + 8 / 2, 1 + 8 / 4, 1 + 8 / 8], split=True)
    assert fit.at(1024) == pytest.approx(1 + 8 / 1024)
    # times that grow with W (noise, a fixed cost) have no 1/W trend: their median
    assert SelectionFit.fit([2, 4, 8], [0.4, 0.5, 0.45], split=True).at(1024) == 0.45


# -- compute and overlap -------------------------------------------------------------------------
WORK = StepWork("toy", 32, flops=2e12, kernels=100, forward_s=0.01, backward_s=0.02,
                ready_s=(0.019, 0.015, 0.004, 0.001), sizes=(100_000, 200_000, 7_000_000, 300_000))


def test_ddp_buckets_follow_the_ready_order_with_a_small_first_bucket():
    # ready order: 4th (1 ms), 3rd (4 ms), 2nd (15 ms), 1st (19 ms); 1 MiB first bucket holds 262,144 floats
    assert ddp_buckets(WORK) == [(0.05, 300_000), (0.2, 7_000_000), (0.95, 300_000)]


def test_the_exposed_exchange_is_what_runs_past_the_backward():
    # buckets ready at 1, 4, 19 ms of a 20 ms backward, each taking 5 ms: 1-6, 6-11, 19-24 -> 4 ms exposed
    assert exposed_exchange_s([1.0, 4.0, 19.0], [5.0, 5.0, 5.0], 20.0) == 4.0
    assert exposed_exchange_s([1.0, 2.0], [1.0, 1.0], 20.0) == 0.0


def test_a_profile_derives_ms_from_flops_or_kernel_launches():
    profile = ComputeProfile("gpu", "a GPU", peak_tflops=100, efficiency=0.5, launch_us=10)
    ms, source = profile.step_ms(WORK, measured_ms=300.0)
    assert ms == pytest.approx(40.0)  # 2e12 / (100e12 * 0.5) s
    assert "GFLOP" in source
    small = StepWork("tiny", 32, flops=1e9, kernels=100, forward_s=0.01, backward_s=0.02, ready_s=(0.0,), sizes=(1,))
    ms, source = profile.step_ms(small, 300.0)
    assert ms == pytest.approx(1.0) and source.startswith("launch-bound: 100 kernels x 10 us on a GPU; FLOP fallback")
    measured = ComputeProfile("gpu", "a GPU", 100, 0.5, 10, {"toy": 7.5})
    assert measured.step_ms(WORK, 300.0)[0] == 7.5
    assert ComputeProfile.load("measured").step_ms(WORK, 300.0)[0] == 300.0


def test_every_shipped_profile_loads_and_an_unknown_one_names_the_choices():
    for name in ("v100", "a100", "h100", "h200"):
        profile = ComputeProfile.load(name)
        assert profile.peak_tflops > 0 and 0 < profile.efficiency <= 1
    with pytest.raises(ConfigError, match="compute_profile=tpu does not exist: choose one of measured, a100, h100, h200, v100"):
        ComputeProfile.load("tpu")


# -- the step -----------------------------------------------------------------------------------
def test_the_step_sums_its_terms():
    point = Point("topk", 64, "net", 10.0, 1.0, 4.0, 2.0, 0.0, 0.0, 0.0, False)
    assert point.step_ms == 13


def test_the_clusters_the_study_models_on_by_default_are_h200_clusters():
    from experiments.studies.endtoend.__main__ import NETWORKS

    assert NETWORKS == ("dgx_h200_400g_ib", "h200x8_200gbe_roce", "h200x8_100gbe_roce")
    for name in NETWORKS:
        network = NetworkModel.preset(name)
        assert network.gpus_per_node == 8 and network.bf16 and network.price(list(UNION_LEDGER), 1024) > 0


def test_gpus_without_bf16_model_fp16_as_their_16_bit_baseline():
    """V100 has no bf16: on its presets dense_bf16 is not modelled and dense_fp16 is the 16-bit
    baseline; A100 and H100 (and the flat presets, which name no GPU) keep both."""
    v100, dgx, flat = (NetworkModel.preset(n) for n in ("v100x4_25gbe", "dgx_a100_200g_ib", "10gbe"))
    assert not runs_on("dense_bf16", v100) and runs_on("dense_fp16", v100) and runs_on("topk", v100)
    assert runs_on("dense_bf16", dgx) and runs_on("dense_fp16", dgx) and runs_on("dense_bf16", flat)
    # the modelled GPU's profile says it where it does: H200s on the V100 cluster's network have bf16
    h200, v100_gpu = ComputeProfile.load("h200"), ComputeProfile.load("v100")
    assert runs_on("dense_bf16", v100, h200) and not runs_on("dense_bf16", flat, v100_gpu)
    assert runs_on("dense_bf16", v100, ComputeProfile.load("measured")) is False  # this machine: the network's


# -- the whole study, cut down -------------------------------------------------------------------
@pytest.mark.slow
def test_quick_endtoend_writes_the_break_even_the_figures_and_every_cell(tmp_path):
    """The quickstart study on the bundled digits (a few short runs), modelled on the three H200
    clusters at W = 4 to 1,024: a break-even table and a figure per cluster, a verdict row per
    known steps ratio, and a JSON cell with its eight moves for every sparsifier, cluster and W."""
    out = tmp_path / "endtoend"
    result = subprocess.run([sys.executable, "-m", "experiments.studies.endtoend", "--quick", "--out", str(out)],  # --quick: quickstart
                            cwd=REPO, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    text = (out / "endtoend.md").read_text()
    serial = json.loads((out / "endtoend.json").read_text())
    study = serial["quickstart"]
    assert study["networks"] == ["dgx_h200_400g_ib", "h200x8_200gbe_roce", "h200x8_100gbe_roce"]
    for network in study["networks"]:
        assert f"### {network}: break-even" in text and (out / f"endtoend_quickstart_{network}.png").is_file()
    page = report.measured_page(serial)  # --publish's page: the same text from the JSON alone
    assert page == text.split("\n", 2)[2] and sum(line.startswith("| ") for line in page.splitlines()) > 3 * 9
    # the quick convergence sweep (dense and DEFT on digits, three seeds) gives DEFT's steps ratio
    (row,) = [line for line in page.splitlines() if line.startswith("| deft | ") and "laptop convergence sweep" in line]
    (ratio,) = serial["quickstart"]["ratios"]
    assert 1 <= ratio["seeds"] <= 3 and f"{ratio['seeds']} seed" in row and "(mlp on digits)" in row
    assert "- laptop convergence sweep: target " in page
    cells = study["cells"]
    assert {c["method"] for c in cells} == {"deft"} and len(cells) == 3 * 9
    assert {c["workers"] for c in cells} == {2**i for i in range(2, 11)}
    for cell in cells:
        assert cell["low"] <= cell["speedup"] <= cell["high"] and len(cell["moves"]) == 8
        assert cell["speedup"] == pytest.approx(cell["baseline_step_ms"] / cell["step_ms"])
        assert cell["baseline"] in ("dense", "dense_overlap", "dense_bf16", "powersgd")
    assert len(study["verdicts"]) == 3 * 9 and {v["word"] for v in study["verdicts"]} <= {"pays", "does not pay", "depends"}
    # DEFT's statistics runs (two seeds at W = 2 and 4) logged where their coordinates lay: beyond
    # them, DEFT is replayed from all four, and its plan at W is the layout's exactly (W + 1 + its units)
    deft = methods_of(QUICKSTART, out / "quickstart")["deft"]
    assert sorted(r.workers for r in deft.statistics.replays) == [2, 2, 4, 4]
    at_four = [r.measured["k_max"] for r in deft.statistics.replays if r.workers == 4]
    assert deft.statistics.at(4)["k_max"] == pytest.approx(sum(at_four) / 2)
    _check_the_extrapolation_on(out)
    assert deft.statistics.at(1024)["plan"] == deft.statistics.replays[0].structure.at(1024)["plan"] > 1024
    # --skip-runs models the same runs again, in seconds, to the same tables (the compute is timed again here)
    again = subprocess.run([sys.executable, "-m", "experiments.studies.endtoend", "--quick", "--studies", "quickstart", "--out", str(out),
                            "--skip-runs"], cwd=REPO, capture_output=True, text=True, timeout=300)
    shape = [line.split(" | ")[0] for line in text.splitlines()]
    assert again.returncode == 0 and [line.split(" | ")[0] for line in (out / "endtoend.md").read_text().splitlines()] == shape
    _publish_writes_the_page_and_its_figures(out, tmp_path / "pages")


def _publish_writes_the_page_and_its_figures(out, pages):
    """--publish's page (into `pages` here, docs/measured by default): the header, the JSON's
    tables, every figure it shows beside it, and analysis.measured --check finds it sound."""
    from analysis import measured
    from experiments.studies.endtoend.__main__ import publish

    serial = json.loads((out / "endtoend.json").read_text())
    page = publish(out, ["--quick"], serial, 61.0, pages)
    text = page.read_text()
    assert text.startswith("# Does sparsification pay? As make endtoend measured it") and "1 min 01 s" in text
    assert report.measured_page(serial).splitlines()[0] in text
    for png in serial["quickstart"]["figures"].values():
        assert f"]({png})" in text and (pages / png).is_file()
    assert measured.check(pages) == []


def _check_the_extrapolation_on(out):
    """The extrapolation's check, on the quick runs: fitted on W = 2, compared with the runs at W = 4."""
    (out / "check").mkdir()
    (out / "check" / "runs").symlink_to(out / "quickstart")
    verdict = check.main(["--out", str(out / "check"), "--skip-runs", "--methods", "deft", "--fit", "2", "--check", "4"])
    (row,) = json.loads((out / "check" / "check.json").read_text())
    assert row["method"] == "deft" and row["workers"] == 4 and row["runs"] == 2 and row["measured"]["sent_bytes"] > 0
    assert row["error"]["union"] == pytest.approx(row["extrapolated"]["union"] / row["measured"]["union"] - 1)
    for key, values in row["per_run"].items():  # the mean over the seeds, and how far another set could move it
        assert len(values) == 2 and row["measured"][key] == pytest.approx(sum(values) / 2)
        assert row["standard_error"][key] == pytest.approx(abs(values[0] - values[1]) / 2)
    assert verdict == (0 if max(abs(row["error"]["union"]), abs(row["error"]["sent_bytes"])) <= 0.10 else 1)
    assert "largest |error| of |U| and bytes" in (out / "check" / "check.md").read_text()


def test_every_sweep_writes_its_own_folder_and_no_run_evaluates_along_the_way():
    """make endtoend runs two sweeps at a time: no two share a folder (run.log, Hydra's
    multirun.yaml, the report); every sweep is a short statistics sweep (no accuracy runs)."""
    from experiments.studies.endtoend.studies import STUDIES

    for quick in (False, True):
        folders = [s.folder for study in STUDIES.values() for s in study.sweeps(quick)]
        assert len(folders) == len(set(folders))
    sweeps = [sweep for study in STUDIES.values() for sweep in study.sweeps()]
    assert all(any(a.endswith("_statistics") for a in s.args if a.startswith("experiment=")) for s in sweeps)


def test_a_missing_steps_from_folder_is_refused_before_anything_runs(tmp_path):
    from experiments.studies.endtoend.__main__ import main

    with pytest.raises(SystemExit, match=r"--steps-from .*nowhere: no such folder"):
        main(["--steps-from", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


ENDTOEND_JOBS = {"resnet18/statistics_topk": 5, "resnet18/statistics_deft": 5, "resnet18/statistics_micro": 5,
                 "resnet18/statistics_exdyna": 5, "resnet18/base": 4}


@pytest.mark.parametrize("folder", ENDTOEND_JOBS)
def test_every_sweep_of_make_endtoend_composes_and_validates(folder, tmp_path):
    """Each command line passes run.py's pre-flight with the jobs the study means: each sparsifier
    at W = 2 to 32 (MiCRO and ExDyna from a calibrated start), the dense baselines at W = 2, one seed."""
    from experiments.studies.endtoend.studies import STUDIES
    from experiments.engine.launcher.compose import preflight

    (sweep,) = [s for s in STUDIES["resnet18"].sweeps() if s.folder == folder]
    assert preflight(["-m", *sweep.args, f"hydra.sweep.dir={tmp_path}"]) == ENDTOEND_JOBS[folder]
