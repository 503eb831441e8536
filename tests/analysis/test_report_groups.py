"""Reports compare like with like: runs are averaged only when nothing but their seed differs, the
keys that differ across rows are named, and failed, unfinished and non-finite runs are listed
and never averaged in. Cheap run directories written with the results store's writer."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from analysis.report import write_report
from experiments.runformat import run_dir as run_files
from experiments.runformat.store import RunStore


def write_run(run_dir: Path, max_steps: int, seed: int, status: str = "done", skipped: bool = False,
              lr: float = 0.1, settings: dict | None = None, last_eval: float | None = None,
              device: dict | None = None, resolved_device: str | None = None) -> Path:
    """A Top-k run of `max_steps` logged steps (one evaluation), as the runner lays it out.
    `last_eval`: a second, later evaluation with this accuracy (NaN: written as null).
    `device`: env.json's device section (the machine that made the run); `resolved_device`:
    the device the run computed on (env.json's resolved section, cpu or cuda)."""
    run_dir.mkdir(parents=True)
    config = {"sparsifier": {"name": "topk", "density": 0.01, "exchange": "union_allreduce"},
              "model": {"name": "mlp"}, "dataset": {"name": "digits"}, "optimizer": {"name": "sgd", "lr": lr},
              "logger": {"name": "local", "log_every": 1}, "workers": 2, "processes": 1, "epochs": 1,
              "max_steps": max_steps, "seed": seed, "warmup_steps": 0, "output_root": f"/tmp/out{seed}", "tag": ""}
    for dotted, value in (settings or {}).items():  # "logger.log_every": 10
        *parents, leaf = dotted.split(".")
        node = config
        for parent in parents:
            node = node[parent]
        node[leaf] = value
    run_files.write_yaml(run_dir / run_files.CONFIG, config)
    store = RunStore(run_dir)
    resolved = {"world": "hosted", "processes": 1, **({"device": resolved_device} if resolved_device else {})}
    store.write_json(run_files.ENV, {"resolved": resolved, "job": {"group": "g"},
                                     **({"device": device} if device else {})})
    writer = store.open_metrics()
    for step in range(max_steps):
        error = 0.5 + 0.1 * seed + step  # seeds and step counts give different numbers
        writer.write({"step": step, "kind": "train", "epoch": 0, "density/error": error, "density/actual": 0.01 * (1 + error),
                      "density/target": 0.01, "buildup": 1.0 + error, "time/select_ms_max": 1.0, "train/loss": 1.0})
    if skipped:  # on_nonfinite=skip's row for a skipped step (experiments/engine/core/skip.py)
        writer.write({"step": max_steps, "kind": "train", "epoch": 0, "train/skipped": 1.0, "train/skipped_total": 1.0})
    writer.write({"step": max_steps - 1, "kind": "eval", "epoch": 0, "eval/accuracy": 0.5 + 0.01 * seed})
    if last_eval is not None:
        writer.write({"step": max_steps - 1, "kind": "eval", "epoch": 1, "eval/accuracy": last_eval})
    writer.close()
    store.set_status(status, **({"error": "rank0: RuntimeError: injected"} if status == "failed" else {}))
    if status == "done":
        summary = {"task": {"kind": "classification", "metric": "eval/accuracy", "higher_is_better": True},
                   "dataset": {"name": "digits", "source": "real"}, "steps": max_steps}
        if skipped:
            summary["train/skipped_steps"] = 1
        store.write_json(run_files.SUMMARY, summary)
    assert {run_files.METRICS, run_files.STATUS} <= {path.name for path in run_dir.iterdir()}
    return run_dir


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    """Top-k at max_steps=3 and 4, two seeds each; and at max_steps=3 a failed, a non-finite
    (one skipped step) and an unfinished run."""
    root = tmp_path / "sweep"
    number = 0
    for max_steps in (3, 4):
        for seed in (0, 1):
            write_run(root / f"{number}_topk_s{seed}", max_steps, seed)
            number += 1
    write_run(root / "failed", 3, 2, status="failed")
    write_run(root / "nonfinite", 3, 3, skipped=True)
    write_run(root / "unfinished", 3, 4, status="running")
    return root


def _summary(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "summary.csv")


def test_a_sweep_mixing_step_counts_gives_a_row_per_count_and_names_the_key(mixed: Path, tmp_path: Path) -> None:
    text = write_report([mixed], tmp_path / "report", cache=False)
    summary = _summary(tmp_path / "report")
    assert sorted(summary["cfg.max_steps"]) == [3, 4]  # two rows, not one average over 3 and 4 steps
    assert (summary["runs"] == 2).all() and (summary["seeds"] == 2).all()
    # the two seeds of max_steps=3 only: the failed, non-finite and unfinished runs are not averaged in
    three = summary[summary["cfg.max_steps"] == 3].iloc[0]
    assert three["density_error"] == pytest.approx(((0.5 + 1.5 + 2.5) / 3 + (0.6 + 1.6 + 2.6) / 3) / 2)
    report = (tmp_path / "report" / "report.md").read_text()
    assert "Rows also differ in: max_steps" in report and "Rows also differ in: max_steps" in text
    header = text.splitlines()[0].split()
    assert "max_steps" in header  # a column of the table, like the method labels' knobs
    # output_root and seed differ too, but change nothing measured: no column, no split
    assert "output_root" not in header and "seed" not in header


def test_failed_nonfinite_and_unfinished_runs_are_flagged_and_never_averaged(mixed: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    write_report([mixed], out, include_unfinished=True, cache=False)
    summary = _summary(out)
    # --include-unfinished: the running run in a row of its own, never the failed or non-finite one
    assert summary["runs"].sum() == 5
    alone = summary[summary["status"] == "running"]
    assert len(alone) == 1 and alone["runs"].item() == 1 and alone["cfg.max_steps"].item() == 3
    assert set(summary["status"]) == {"done", "running"}
    report = (out / "report.md").read_text()
    problems = report.split("## Failed, unfinished, diverged and non-finite runs")[1].split("\n## ")[0]
    rows = {line.split("|")[1].strip(): line for line in problems.splitlines() if line.startswith("| ") and "---" not in line}
    assert {"failed", "nonfinite", "unfinished"} <= rows.keys()
    assert "1 step(s) skipped (on_nonfinite=skip)" in rows["nonfinite"]
    assert "injected" in rows["failed"] and "still running" in rows["unfinished"]
    runs = pd.read_csv(out / "runs.csv").set_index("name")
    assert runs.loc["nonfinite", "skipped_steps"] == 1 and runs.loc["0_topk_s0", "skipped_steps"] == 0


@pytest.mark.parametrize("key, values, separate", [
    ("optimizer.lr", (0.1, 0.05), True),
    ("logger.log_every", (1, 10), True),  # it decides which steps a run's numbers average
    ("tag", ("", "baseline"), True),  # a user's own label tells runs apart
    ("logger.wandb_mode", ("disabled", "offline"), False),  # where metrics also go: same numbers
])
def test_a_setting_that_changes_what_is_measured_is_a_row_of_its_own(tmp_path: Path, key: str, values: tuple,
                                                                      separate: bool) -> None:
    first, second = values
    for name, seed, value in (("a0", 0, first), ("a1", 1, first), ("b0", 0, second)):
        write_run(tmp_path / "runs" / name, 3, seed, settings={key: value})
    text = write_report([tmp_path / "runs"], tmp_path / "report", cache=False)
    summary = _summary(tmp_path / "report")
    if separate:
        assert sorted(summary["runs"]) == [1, 2] and f"cfg.{key}" in summary.columns
        assert key in text.splitlines()[0]  # a column of the table, named
    else:
        assert list(summary["runs"]) == [3] and f"cfg.{key}" not in summary.columns


AVX2 = {"cpu_model": "AMD EPYC 7B12", "cpu_capability": "AVX2", "blas": "mkl", "blas_version": "2024.2", "onednn": "v3.12.0"}


def _kept_apart_by(tmp_path: Path, separate: list):
    """Reports the three runs under tmp_path/runs (two seeds of one machine, one other run) and
    checks that exactly the `separate` env columns keep the other run in a row of its own, named
    in the table's header; returns the summary."""
    text = write_report([tmp_path / "runs"], tmp_path / "report", cache=False)
    summary = _summary(tmp_path / "report")
    assert sorted(column for column in summary.columns if column.startswith("env.")) == separate
    assert sorted(summary["runs"]) == ([1, 2] if separate else [3])
    for column in separate:
        assert column in text.splitlines()[0]
    return summary


@pytest.mark.parametrize("other, separate", [
    ({**AVX2, "cpu_model": "AMD EPYC 9B14", "cpu_capability": "AVX512"}, ["env.cpu_capability", "env.cpu_model"]),
    ({**AVX2, "blas_version": "2025.0"}, ["env.blas_version"]),
    (AVX2, []),  # the same machine: the seeds average as before
])
def test_runs_made_on_different_machines_are_rows_of_their_own_naming_the_machine_key(
        tmp_path: Path, other: dict, separate: list) -> None:
    """Float results depend on the CPU's kernels and the math libraries (docs/reproducibility.md):
    the report never averages two machines' runs together, and its table names what differs."""
    for name, seed, device in (("a0", 0, AVX2), ("a1", 1, AVX2), ("b0", 0, other)):
        write_run(tmp_path / "runs" / name, 3, seed, device=device)
    summary = _kept_apart_by(tmp_path, separate)
    if separate:
        assert set(summary[separate[0]].astype(str)) == {AVX2[separate[0][4:]], other[separate[0][4:]]}


H200 = {**AVX2, "gpu": {"name": "NVIDIA H200", "capability": "9.0", "driver": "580.159", "cuda": "13.0",
                        "cudnn": "91500", "count": 1}}


@pytest.mark.parametrize("other, other_device, separate", [
    ({**H200, "gpu": {**H200["gpu"], "name": "NVIDIA A100-SXM4-80GB", "capability": "8.0"}}, "cuda",
     ["env.gpu", "env.gpu_capability"]),
    ({**H200, "gpu": {**H200["gpu"], "driver": "570.86"}}, "cuda", ["env.gpu_driver"]),
    (H200, "cpu", ["env.device"]),  # the same machine, one run on its CPU
    (H200, "cuda", []),
])
def test_runs_on_different_gpus_or_devices_are_rows_of_their_own_naming_the_gpu_key(
        tmp_path: Path, other: dict, other_device: str, separate: list) -> None:
    """As CPUs are kept apart: the GPU model, its compute capability and driver, and the device a
    run computed on (a CPU run and a CUDA run of one config) are settings of their own."""
    for name, seed, device, resolved in (("a0", 0, H200, "cuda"), ("a1", 1, H200, "cuda"), ("b0", 0, other, other_device)):
        write_run(tmp_path / "runs" / name, 3, seed, device=device, resolved_device=resolved)
    _kept_apart_by(tmp_path, separate)


@pytest.mark.parametrize("reduction, devices, said", [
    ("rank_order", ("cuda", "cpu"), True),
    ("rank_order", ("cpu", "cpu"), False),
    ("ring", ("cuda", "cpu"), False),  # ring promises no bits across layouts: nothing to warn about
])
def test_the_report_says_when_runs_compared_under_rank_order_ran_on_different_devices(
        tmp_path: Path, reduction: str, devices: tuple, said: bool) -> None:
    """device=auto with one GPU puts a hosted run on it and a 2-process run on the CPU: a user
    comparing them under rank_order is told why their rows differ, instead of comparing silently."""
    for name, device, processes in (("hosted", devices[0], 1), ("spread", devices[1], 2)):
        write_run(tmp_path / "runs" / name, 3, 0, device=H200, resolved_device=device,
                  settings={"processes": processes, "reduction": reduction})
    text = write_report([tmp_path / "runs"], tmp_path / "report", cache=False)
    report = (tmp_path / "report" / "report.md").read_text()
    note = "Runs compared under reduction=rank_order ran on different devices (1 on cpu, 1 on cuda)"
    assert (note in text and note in report and "device=cpu" in report) == said


def test_a_non_finite_last_evaluation_is_flagged_not_replaced_by_an_earlier_one(tmp_path: Path) -> None:
    """Epoch 0 evaluates to 0.55, epoch 1 to NaN: the run's accuracy is missing (not 0.55), the
    run is listed as non-finite and kept out of the average of the other seeds."""
    for seed in (0, 1):
        write_run(tmp_path / "runs" / f"s{seed}", 3, seed)
    write_run(tmp_path / "runs" / "nan_eval", 3, 5, last_eval=float("nan"))
    assert '"eval/accuracy": null' in (tmp_path / "runs" / "nan_eval" / run_files.METRICS).read_text()
    out = tmp_path / "report"
    write_report([tmp_path / "runs"], out, cache=False)
    summary = _summary(out)
    assert summary["runs"].tolist() == [2] and summary["metric"].item() == pytest.approx(0.505)
    runs = pd.read_csv(out / "runs.csv").set_index("name")
    assert pd.isna(runs.loc["nan_eval", "metric"]) and runs.loc["s1", "metric"] == pytest.approx(0.51)
    problems = (out / "report.md").read_text().split("## Failed, unfinished, diverged and non-finite runs")[1].split("\n## ")[0]
    (row,) = [line for line in problems.splitlines() if line.startswith("| nan_eval ")]
    assert "last evaluation non-finite (eval/accuracy)" in row


def _figure_texts(figure) -> set[str]:
    """Every label a reader sees: tick labels, legend entries (axes' and figure's), the labels
    of lines and bar containers, free text and titles."""
    texts: set[str] = set()
    for axis in figure.axes:
        texts |= {label.get_text() for label in axis.get_xticklabels() + axis.get_yticklabels()}
        if axis.get_legend():
            texts |= {text.get_text() for text in axis.get_legend().get_texts()}
        texts |= {line.get_label() for line in axis.get_lines()} | {bars.get_label() for bars in axis.containers}
        texts |= {text.get_text() for text in axis.texts} | {axis.get_title()}
    return texts | {text.get_text() for legend in figure.legends for text in legend.get_texts()}


# The figures these done top-k runs feed: no step phases, residuals, thresholds, partitions,
# DEFT units or DGC variants are logged by them, so the other figures have nothing to draw.
DRAWN_FOR_MIXED = {"method_comparison", "selection_time_vs_workers", "buildup_density_vs_workers",
                   "compression_error", "task_metric_curves"}


def test_figures_never_draw_runs_of_different_settings_as_one_series(mixed: Path) -> None:
    """The figures split series as the report splits rows: the two step counts are two series
    in every figure drawn (the `settings` key column), the comparison figure's bars included."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from analysis.figures import FIGURES
    from analysis.figures.style import series_labels
    from analysis.load import load_runs

    both = {"topk max_steps=3", "topk max_steps=4"}
    tables = load_runs([mixed], cache=False).select(status="done")
    assert set(series_labels(tables.steps)) == both and set(series_labels(tables.epochs)) == both
    drawn = set()
    for name, (draw, _) in FIGURES.items():
        figure = draw(tables)
        if figure is None:
            continue
        drawn.add(name)
        assert both <= _figure_texts(figure), name
        plt.close(figure)
    assert drawn == DRAWN_FOR_MIXED
