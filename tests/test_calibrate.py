"""`make calibrate`: the fitter recovers known links from synthetic timings, and a quick real
calibration (W=2 gloo processes, a few sizes, one repeat) writes a preset that composes."""
from __future__ import annotations

import pytest

from experiments.studies.calibrate.__main__ import main, model_of_factory, parse_bytes, sizes_up_to
from experiments.studies.calibrate.fit import coefficients, fit_link, median_error, model_time
from experiments.studies.calibrate.measure import Sample
from experiments.engine.core.network import NetworkModel
from experiments.engine.launcher.compose import compose_job

CPU = model_of_factory(0, "test")


def synthetic(alpha_s: float, bytes_per_s: float, model_of=CPU, workers=(2, 4, 8)) -> list[Sample]:
    truth = model_of(alpha_s, bytes_per_s)
    return [Sample(op, w, n, model_time(truth, op, w, n), 1)
            for op in ("all_reduce", "all_gather", "broadcast") for w in workers for n in sizes_up_to(64 * 2**20)]


def test_coefficients_are_the_model_formula():
    # ring all-reduce, W=4, 4 MB: 2 * 3 = 6 messages, 6 * 1 MB = 6e6... of 4 MiB / 4 each
    a, b = coefficients(CPU, "all_reduce", 4, 4 * 2**20)
    assert a == pytest.approx(6.0, rel=1e-12) and b == pytest.approx(6 * 2**20, rel=1e-12)
    # all-gather of a 4 MiB output at W=4: 3 messages of 1 MiB
    assert coefficients(CPU, "all_gather", 4, 4 * 2**20) == pytest.approx((3.0, 3 * 2**20), rel=1e-12)
    # binomial broadcast at W=8: 3 rounds of the whole message
    assert coefficients(CPU, "broadcast", 8, 1000) == pytest.approx((3.0, 3000.0), rel=1e-12)


@pytest.mark.parametrize("alpha_s,gbit", [(50e-6, 8.0), (1.5e-3, 0.8), (2e-6, 100.0)])
def test_fit_recovers_a_known_link_exactly(alpha_s, gbit):
    samples = synthetic(alpha_s, gbit * 1e9 / 8)
    fit = fit_link(samples, CPU, min_bytes=64 * 1024)
    assert fit.latency_us == pytest.approx(alpha_s * 1e6, rel=1e-9)
    assert fit.bandwidth_gbit == pytest.approx(gbit, rel=1e-9)
    assert median_error(samples, CPU(fit.alpha_s, fit.bytes_per_s), 64 * 1024) < 1e-9


def test_fit_of_an_intra_node_link_on_gpus():
    """On one node of 8 GPUs the fitted link is the intra-node one (the inter one never used)."""
    gpus = model_of_factory(8, "test")
    fit = fit_link(synthetic(10e-6, 150e9, gpus), gpus)
    assert (fit.latency_us, fit.bandwidth_gbit) == (pytest.approx(10.0, rel=1e-9), pytest.approx(1200.0, rel=1e-9))


def test_fit_keeps_parameters_non_negative():
    # pure bandwidth timings plus noise that would pull alpha below zero: alpha is 0, beta refitted
    samples = [Sample("all_reduce", 2, n, n / 1e9 * (1 - 0.1 * (n == 4**8)), 1) for n in sizes_up_to(2**26)[7:]]
    fit = fit_link(samples, CPU)
    assert fit.alpha_s >= 0 and fit.bytes_per_s > 0


def test_sizes_and_byte_units():
    assert sizes_up_to(1024) == [4, 16, 64, 256, 1024]
    assert (parse_bytes("64MB"), parse_bytes("256KB"), parse_bytes("4096")) == (64 * 2**20, 256 * 1024, 4096)


def test_a_quick_real_calibration_writes_a_preset_that_composes(tmp_path, capsys):
    assert main(["--workers", "2", "--max-bytes", "256KB", "--repeats", "1", "--backend", "gloo",
                 "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "median relative error over sizes >= 64 KB" in out and "all_reduce" in out
    presets = list((tmp_path / "network").glob("*_w2.yaml"))
    assert len(presets) == 1
    model = NetworkModel.preset(presets[0])
    assert (model.gpus_per_node, model.algorithm) == (1, "ring") and model.bandwidth_gbit > 0
    cfg = compose_job([f"hydra.searchpath=[file://{tmp_path}]", f"network={presets[0].stem}"])
    assert NetworkModel.from_config(cfg.network) == model
