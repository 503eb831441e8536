"""`make endtoend` on a GPU from measured numbers: a profile's measured compute applies only to
its model, batch and input; the measured selection table, its log-W interpolation and the
modelled fallback; the user's --compute-ms and --select-ms reach the modelled step exactly; and
the measuring command writes a profile the model then reads (on the CPU here)."""
from __future__ import annotations

import types

import pytest
import torch
import yaml

from experiments.engine.core.ledger import Collective
from experiments.studies.endtoend import measure_compute
from experiments.studies.endtoend.__main__ import measure, parse_pairs
from experiments.studies.endtoend.compute import ComputeProfile, StepWork
from experiments.studies.endtoend.extrapolate import fit_statistics
from experiments.studies.endtoend.model import Method, Study
from experiments.studies.endtoend.selection import log_interpolate
from sparsifiers.common.kernels.selection_model import SelectCost, SelectionModel, fit
from experiments.studies.endtoend.studies import QUICKSTART
from experiments.engine.core.network import NetworkModel


def _work(batch=32, shape=(3, 32, 32), numel=11_173_962, model="resnet18") -> StepWork:
    return StepWork(model, batch, flops=106.5e9, kernels=288, forward_s=0.05, backward_s=0.1, ready_s=(0.0,),
                    sizes=(numel,), input_shape=shape)


def test_the_h200_measurement_applies_to_its_model_batch_and_input_only():
    h200 = ComputeProfile.load("h200")
    ms, source = h200.step_ms(_work(), measured_ms=500.0)
    assert ms == 11.8945 and source.startswith("measured on NVIDIA H200: resnet18_cifar10")
    # the laptop-scale study: ResNet-18 on Fashion-MNIST at batch 16 is another step: the fallback, said so
    laptop = _work(16, (1, 28, 28), 11_172_810)
    ms, source = h200.step_ms(laptop, measured_ms=500.0)
    assert ms == pytest.approx(288 * 6e-3) and "FLOP fallback" in source and "not applied here" in source
    assert "-85%" in source
    # ... unless the study stands for the measured workload (the same model): then its step, said so
    ms, source = h200.step_ms(laptop, measured_ms=500.0, stands_for="resnet18_cifar10")
    assert ms == 11.8945 and "the step this study stands for" in source and "batch 16, input 1x28x28" in source
    assert h200.step_ms(_work(model="cnn"), 500.0, stands_for="resnet18_cifar10")[0] != 11.8945  # another model


def _study(profile: ComputeProfile, numel: int, **kwargs) -> Study:
    stats = fit_statistics([2, 4], [100.0, 190.0], [50.0, 50.0], [40.0, 40.0], numel=numel, split=False)
    template = types.SimpleNamespace(template=(Collective("all_reduce", 100, 4),), exchange="dense",
                                     template_union=100, template_k_max=100)
    methods = {name: Method(name, None, template, stats, False) for name in ("deft", "topk")}
    return Study("resnet18", _work(numel=numel), 150.0, profile, methods, **kwargs)


@pytest.mark.parametrize("compute_ms", [8.0, 10.0])
def test_the_reviews_cases_flow_into_the_points_exactly(compute_ms):
    """ResNet-18's compute at 8 and at 10 ms and DEFT's selection at 3 ms, given as inputs."""
    study = _study(ComputeProfile.load("v100"), 11_172_810, compute_override=compute_ms, select_override={"deft": 3.0})
    network = NetworkModel.preset("v100x4_10gbe")
    for workers in (4, 64, 1024):
        deft = study.point(study.methods["deft"], workers, network)
        assert (deft.compute_ms, deft.select_ms) == (compute_ms, 3.0)
        assert study.point(study.methods["topk"], workers, network).compute_ms == compute_ms
    assert study.compute_ms()[1] == "given on the command line (--compute-ms)"
    assert parse_pairs("--compute-ms", ["resnet18=8"]) == {"resnet18": 8.0}
    assert parse_pairs("--select-ms", ["deft=3,topk=0.5"]) == {"deft": 3.0, "topk": 0.5}


def test_selection_is_the_gpus_measurement_at_the_measured_layout_interpolated_in_log_w():
    h200 = ComputeProfile.load("h200")
    study = _study(h200, 11_172_810, density=0.001)  # within 1% of the measured 11,173,962, its density
    assert study.select_ms("micro", 16, 40.0)[0] == 0.0858
    between = study.select_ms("micro", 8 * 2**0.5, 40.0)[0]  # half way in log W from W = 8 to 16
    assert between == pytest.approx((0.0847 + 0.0858) / 2)
    assert study.select_ms("micro", 1024, 40.0)[0] == 0.0768  # held beyond W = 64
    assert study.select_ms("topk", 4, 40.0)[1].startswith("measured on NVIDIA H200")
    assert log_interpolate({2: 1.0, 8: 3.0}, 4) == pytest.approx(2.0)


def test_a_measurement_of_other_code_or_another_density_is_not_used_and_the_source_says_why():
    """DEFT's H200 time measured the select that issue 36 replaced (hundreds of kernels a call);
    the ResNet-18 study runs d = 0.01 where the H200 measured 0.001: both are modelled."""
    costs = {"deft": {4: SelectCost(38, 1e8, 4e7)}, "topk": {4: SelectCost(9, 4e8, 4.5e7)}}
    study = _study(ComputeProfile.load("h200"), 11_172_810, density=0.001, select_costs=costs)
    ms, source = study.select_ms("deft", 4, 40.0)
    assert ms != 1.3674 and source.startswith("modelled (NVIDIA H200 measured the code of be28d8a, since rewritten")
    assert study.select_ms("topk", 4, 40.0)[1].startswith("measured")
    study = _study(ComputeProfile.load("h200"), 11_172_810, density=0.01, select_costs=costs)
    ms, source = study.select_ms("topk", 4, 40.0)
    assert ms != 0.5522 and "measured d = 0.001, the study runs d = 0.01" in source


def test_selection_elsewhere_is_modelled_from_counted_ops_and_bytes_and_says_so():
    study = _study(ComputeProfile.load("h200"), 71_802)  # the quickstart CNN: no measurement at its size
    study.select_costs = {"deft": {4: SelectCost(50, 1e6, 4e5), 32: SelectCost(80, 2e6, 8e5)}}
    ms, source = study.select_ms("deft", 4, 40.0)
    model = ComputeProfile.load("h200").selection_model
    assert ms == pytest.approx(50 * model.launch_us * 1e-3 + 6e5 / (model.bandwidth_gbs * 1e9) * 1e3
                               + 4e5 / (model.ranking_gbs * 1e9) * 1e3)
    assert source.startswith("modelled: ops x") and "calibrated on NVIDIA H200" in source
    ms, source = study.select_ms("topk", 4, 40.0)  # nothing counted: the hosted time, scaled, said so
    assert "scaled" in source and ms == pytest.approx(40.0 * 288 * 6e-3 / 150.0)
    # a GPU without selection measurements borrows the H200's calibration, at its own memory bandwidth
    v100 = ComputeProfile.load("v100").selection_model
    assert v100.launch_us == model.launch_us and v100.bandwidth_gbs == pytest.approx(model.bandwidth_gbs * 900 / 4800)
    assert v100.ranking_gbs == pytest.approx(model.ranking_gbs * 900 / 4800)
    assert SelectionModel(10, 1000, "x").ms(SelectCost(3, 2e6)) == pytest.approx(0.03 + 0.002)
    assert SelectionModel(10, 1000, "x", 100).ms(SelectCost(3, 2e6, 1e6)) == pytest.approx(0.03 + 0.001 + 0.01)


def test_the_fit_recovers_a_model_that_generated_the_measurements():
    truth = SelectionModel(7.0, 4000.0, "x", 150.0)
    costs = [SelectCost(9, 4e8, 4.5e7), SelectCost(8, 1e8), SelectCost(48, 1.3e9), SelectCost(13, 5e8, 1e6),
             SelectCost(16, 7e8)]
    launch, bandwidth, ranking = fit(costs, [truth.ms(c) for c in costs])
    assert (launch, bandwidth, ranking) == pytest.approx((7.0, 4000.0, 150.0), rel=1e-6)
    # nothing ranked: the ranking throughput is not fitted, and no term goes negative
    launch, bandwidth, ranking = fit(costs[1:3], [SelectionModel(5.0, 2000.0, "x").ms(c) for c in costs[1:3]])
    assert ranking is None and (launch, bandwidth) == pytest.approx((5.0, 2000.0), rel=1e-6)


def test_selection_is_counted_on_the_gpus_path():
    """DEFT on CPU tensors would take its per-unit loop; counted as a GPU runs it (batched), its
    operations do not grow with the units, and are the op counter's (benchmarks/op_counts.py)."""
    from experiments.studies.benchmarks.op_counts import count_select as bench_count
    from experiments.studies.endtoend.selection import at_operating_point, count_method, gradient_like
    from sparsifiers.common.layout import Layout

    layout = Layout.from_shapes((str(i), (n,)) for i, n in enumerate([4000, 300, 2000, 50, 1000] * 4))
    overrides = ["sparsifier=deft", "dataset=synthetic", "model=mlp"]
    few, many = (count_method(overrides, layout, 0.01, w) for w in (4, 64))
    # Ops vary only with the classes of the rank's bin and whether its layout is cached (a few,
    # kernels/classed_topk.py), not with its unit count.
    assert abs(few.ops - many.ops) <= 4 and few.ranked > 0
    acc = at_operating_point(gradient_like(layout.numel), 0.01)
    assert bench_count("deft", layout, 4, acc, 0.01, warm=True)[0].ops == few.ops


def test_measure_compute_refuses_cuda_without_a_gpu(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    assert measure_compute.main(["--profile", "x", "--device", "cuda", "--profiles-dir", str(tmp_path)]) == 2
    assert "no GPU" in capsys.readouterr().err and not (tmp_path / "x.yaml").exists()


def test_measure_compute_writes_a_profile_the_model_then_uses(tmp_path):
    """On the CPU, the quickstart study's model on the bundled digits, two repeats: the entry
    round-trips through the YAML, a second run keeps the hand-written head, and the model takes
    the measured number for exactly that model, batch and input."""
    args = ["--profile", "cpu_test", "--device", "cpu", "--workloads", "", "--studies", "quickstart",
            "--override", "dataset=digits", "--repeats", "2", "--warmup", "1", "--profiles-dir", str(tmp_path)]
    assert measure_compute.main(args) == 0
    path = tmp_path / "cpu_test.yaml"
    (entry,) = yaml.safe_load(path.read_text())["measured_ms"].values()
    assert entry["model"] == "cnn" and entry["batch"] == 32 and entry["ms"] > 0 and set(entry["parts_ms"]) == {
        "forward", "backward", "optimizer"}
    path.write_text(path.read_text().replace("name: cpu_test", "name: cpu_test  # kept"))
    assert measure_compute.main(args) == 0
    assert "# kept" in path.read_text()
    profile = ComputeProfile.load("cpu_test", tmp_path)
    ms, source = profile.step_ms(measure(QUICKSTART, quick=True)[0], measured_ms=999.0)
    assert ms == yaml.safe_load(path.read_text())["measured_ms"]["quickstart"]["ms"]
    assert source.startswith("measured on CPU")


def test_the_page_states_each_selection_source_once_with_its_methods():
    """The old page repeated one selection-model sentence per method: now each source once."""
    from experiments.studies.endtoend.__main__ import selection_sources

    study = _study(ComputeProfile.load("h200"), 11_172_810, select_override={"deft": 3.0, "topk": 1.0})
    assert selection_sources(study, 16) == "deft, topk: given on the command line (--select-ms)"


def test_a_priced_study_counts_each_select_once_and_a_kept_count_equals_a_fresh_one(tmp_path, monkeypatch):
    """make compare prices every method of its folder at each call; the counts are kept beside the
    runs (pays.COUNTS), so the next pricing counts only a method it has not. Each count equals
    count_method's, which builds its own input, and an edited knob is counted again."""
    from experiments.engine.launcher.compose import compose_job
    from experiments.engine.rank.build import build_dataset, build_model
    from experiments.studies.endtoend import selection
    from sparsifiers.common.layout import Layout

    base, workers, kept = ["dataset=synthetic", "model=mlp"], (4, 32), tmp_path / "counts.json"
    first = selection.count_for_study(base, ["micro"], workers, kept=kept)
    cfg = compose_job(base)
    layout = Layout.from_module(build_model(cfg, build_dataset(cfg)))
    for method, per_w in first.items():
        density = float(compose_job([*base, f"sparsifier={method}"]).sparsifier.density)
        for w, cost in per_w.items():
            assert cost == selection.count_method([*base, f"sparsifier={method}"], layout, density, w), (method, w)
    counted = []
    count_select = selection.count_select
    monkeypatch.setattr(selection, "count_select", lambda *args: counted.append(args[2]) or count_select(*args))
    again = selection.count_for_study(base, ["micro", "deft"], workers, kept=kept)
    assert {m: again[m] for m in first} == first and counted == list(workers)  # DEFT's alone
    counted.clear()
    selection.count_for_study([*base, "sparsifier.density=0.02"], ["micro"], workers[:1], kept=kept)
    assert counted == list(workers[:1])
