"""Runs of the three task kinds: each run's own headline metric in the report and the figures,
stand-in data flagged in the table and on the figures, the model and dataset named on the
figures, the DGC ablation figure, and runs from before tasks existed."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest
import yaml

from analysis.figures import FIGURES, dgc_ablation, task_metric_curves
from analysis.figures.comparison import method_comparison
from analysis.load import load_runs
from analysis.report import write_report
from analysis.report_tables import summary_cells
from analysis.stats import run_stats, summarize
from analysis.synthetic import SyntheticRun, write_run
from analysis.tables import RunTables
from experiments.runformat import run_dir as run_files
from experiments.runformat.headline import task_metric
from tests.analysis.conftest import DGC_VARIANTS, STAND_IN_TEXT

PERPLEXITY = "perplexity (lower is better)"


def rows_of(run_dir: Path, kind: str) -> list[dict]:
    lines = (run_dir / run_files.METRICS).read_text().splitlines()
    return [row for row in map(json.loads, lines) if row["kind"] == kind]


def last_eval(run_dir: Path, metric: str) -> float:
    """The last evaluation of `metric`, straight from metrics.jsonl."""
    return max(rows_of(run_dir, "eval"), key=lambda row: (row["step"], row["epoch"]))[metric]


def suptitle(figure) -> str:
    """The figure's title text, as the Figure object holds it."""
    assert figure is not None
    return figure.get_suptitle()


@pytest.fixture(scope="module")
def tables(workloads: Path) -> RunTables:
    return load_runs(workloads, cache=False)


def test_each_run_carries_its_task_and_data_source(tables: RunTables) -> None:
    runs = tables.runs.assign(part=tables.runs["run_dir"].map(lambda d: Path(d).parent.name)).groupby("part").first()
    assert runs.loc["cifar10", ["task", "task_metric", "data_source"]].tolist() == ["classification", "eval/accuracy", "real"]
    assert runs.loc["wikitext2", ["task", "task_metric", "data_source"]].tolist() == ["language_model", "eval/perplexity", STAND_IN_TEXT]
    assert not runs.loc["wikitext2", "higher_is_better"]
    assert runs.loc["movielens", ["task", "task_metric"]].tolist() == ["recommendation", "eval/hr10"]
    # Old format: no task and no dataset in summary.json -> classification, accuracy, real data.
    assert runs.loc["legacy", ["task", "task_metric", "higher_is_better", "data_source"]].tolist() == [
        "classification", "eval/accuracy", True, "real"]
    # The key columns reach the row tables, so figures can tell tasks and stand-ins apart.
    assert set(tables.epochs["task_metric"].astype(str)) == {"eval/accuracy", "eval/perplexity", "eval/hr10"}


def test_report_table_has_one_column_per_task_metric(tables: RunTables, workloads: Path) -> None:
    summary = summarize(run_stats(tables))
    cells = summary_cells(summary)
    metric_columns = ["accuracy", PERPLEXITY, "HR@10"]
    assert set(metric_columns) <= set(cells.columns)
    assert "metric" not in cells.columns  # one column per metric, never a mixed one
    expected = {  # (model, method) -> (column, run directory, metric)
        ("resnet18", "topk"): ("accuracy", workloads / "cifar10" / "topk", "eval/accuracy"),
        ("lstm", "dense"): (PERPLEXITY, workloads / "wikitext2" / "dense", "eval/perplexity"),
        ("lstm", "topk"): (PERPLEXITY, workloads / "wikitext2" / "topk", "eval/perplexity"),
        ("ncf", "topk"): ("HR@10", workloads / "movielens" / "topk", "eval/hr10"),
        ("mlp", "topk"): ("accuracy", workloads / "legacy" / "topk", "eval/accuracy"),
    }
    for (model, method), (column, run_dir, metric) in expected.items():
        (index,) = summary.index[(summary["model"] == model) & (summary["method"] == method)]
        value = last_eval(run_dir, metric)
        assert summary.loc[index, "task_metric"] == metric
        assert summary.loc[index, "metric"] == pytest.approx(value)
        assert cells.loc[index, column] == task_metric(metric).fmt.format(value)
        assert [cells.loc[index, other] for other in metric_columns if other != column] == ["-", "-"]
    perplexities = cells.loc[summary["task_metric"] == "eval/perplexity", PERPLEXITY]
    assert len(perplexities) == 2 and not perplexities.str.contains("%").any()
    assert float(perplexities.iloc[0]) > 1  # a number of the order of 100, not a fraction shown as %
    assert cells.loc[summary["task_metric"] == "eval/hr10", "HR@10"].str.endswith("%").all()


def test_stand_in_rows_are_flagged_in_the_report(workloads: Path, tmp_path: Path) -> None:
    text = write_report([workloads / "wikitext2", workloads / "movielens"], tmp_path, cache=False)
    report = (tmp_path / "report.md").read_text()
    table = report.split("## Summary per method and worker count")[1].split("\n## ")[0]
    lines = [line for line in table.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = [dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")))) for line in lines[2:]]
    assert {(row["dataset"], row["data"]) for row in rows} == {("wikitext2", "stand-in"), ("movielens", "real")}
    assert "not the paper's data: wikitext2: bible-kjv from nltk (one verse a line)" in table
    assert "stand-in" in text
    assert (tmp_path / "task_metric_curves.png").exists()


def test_every_figure_of_stand_in_runs_says_so_and_names_the_workload(tables: RunTables) -> None:
    stand_in = tables.select(dataset="wikitext2")
    drawn = 0
    for name, (draw, _) in FIGURES.items():
        figure = draw(stand_in)
        if figure is None:
            continue
        drawn += 1
        title = suptitle(figure)
        assert "stand-in data: bible-kjv from nltk (one verse a line); not the paper's data" in " ".join(title.split()), name
        assert "LSTM / WikiText-2" in " ".join(title.split()), name  # titles wrap to the figure width
    assert drawn >= 6


def test_figures_of_real_runs_name_the_workload_without_a_warning(tables: RunTables) -> None:
    title = suptitle(method_comparison(tables.select(dataset="cifar10")))
    assert "ResNet-18 / CIFAR-10" in title and "stand-in" not in title


def test_a_partly_stand_in_figure_counts_the_runs(tables: RunTables) -> None:
    title = " ".join(suptitle(task_metric_curves(tables)).split())
    assert f"stand-in data in 2 of {len(tables.runs)} runs: WikiText-2: bible-kjv" in title
    assert " / " not in title.splitlines()[0]  # several models and datasets: none named in the title


def test_convergence_figure_plots_each_task_metric_with_its_label(tables: RunTables, workloads: Path) -> None:
    figure = task_metric_curves(tables.select(dataset=["cifar10", "wikitext2"], sparsifier=["dense", "topk"]))
    rows = {axis.get_ylabel(): axis for axis in figure.axes if axis.get_xlabel() == "epoch"}
    assert set(rows) == {"eval accuracy (%)", f"eval {PERPLEXITY}"}
    (dense_ppl,) = [line for line in rows[f"eval {PERPLEXITY}"].lines if line.get_color() == "black"]
    expected = [row["eval/perplexity"] for row in rows_of(workloads / "wikitext2" / "dense", "eval")]
    assert dense_ppl.get_ydata() == pytest.approx(expected)  # as logged, not as a percentage
    accuracy_lines = rows["eval accuracy (%)"].lines
    assert len(accuracy_lines) == 2
    (dense_acc,) = [line for line in accuracy_lines if line.get_color() == "black"]
    expected = [100 * row["eval/accuracy"] for row in rows_of(workloads / "cifar10" / "dense", "eval")]
    assert dense_acc.get_ydata() == pytest.approx(expected)
    assert FIGURES["task_metric_curves"][0] is task_metric_curves


def test_dgc_ablation_draws_one_curve_per_knob_variant(tables: RunTables, workloads: Path) -> None:
    figure = dgc_ablation(tables)
    title = suptitle(figure)
    assert "momentum" in title and "warmup" in title and "ResNet-18 / CIFAR-10" in title
    loss_axis, metric_axis = figure.axes
    assert loss_axis.get_xlabel() == metric_axis.get_xlabel() == "epoch"
    assert metric_axis.get_ylabel() == "eval accuracy (%)"
    variants = {", ".join(f"{k}={str(v).lower()}" for k, v in knobs): (number, seeds)
                for number, (knobs, seeds) in enumerate(DGC_VARIANTS)}
    for axis in (loss_axis, metric_axis):
        lines = {line.get_label(): line for line in axis.lines}
        assert set(lines) == {*variants, "dense"}  # dense: the ResNet-18 / CIFAR-10 baseline
        assert lines["dense"].get_color() == "black"
    loss_lines = {line.get_label(): line for line in loss_axis.lines}
    metric_lines = {line.get_label(): line for line in metric_axis.lines}
    for label, (number, seeds) in variants.items():
        run_dirs = [workloads / "ablation" / f"{number}_s{seed}" for seed in range(seeds)]
        per_run_loss = [[statistics.fmean(row["train/loss"] for row in rows_of(run_dir, "train") if row["epoch"] == epoch)
                         for epoch in range(3)] for run_dir in run_dirs]
        per_run_accuracy = [[100 * row["eval/accuracy"] for row in rows_of(run_dir, "eval")] for run_dir in run_dirs]
        assert loss_lines[label].get_xdata() == pytest.approx([0, 1, 2])
        assert loss_lines[label].get_ydata() == pytest.approx(np.mean(per_run_loss, axis=0))  # mean over seeds
        assert metric_lines[label].get_ydata() == pytest.approx(np.mean(per_run_accuracy, axis=0))


def test_dgc_ablation_needs_runs_that_differ_in_a_knob(tables: RunTables) -> None:
    assert dgc_ablation(tables.select(sparsifier=["dense", "topk"])) is None
    same_knobs = tables.runs.loc[tables.runs["method"] == "dgc(momentum=0.9,warmup=true)", "run_id"]
    assert len(same_knobs) == 2 and dgc_ablation(tables.select(run_id=list(same_knobs))) is None


def test_a_run_whose_summary_does_not_say_takes_its_task_from_its_eval_rows(tmp_path: Path) -> None:
    run = write_run(tmp_path / "killed_lm", SyntheticRun("topk", 2, task="language_model", status="running", steps=8, epochs=2))
    config = yaml.safe_load((run / run_files.CONFIG).read_text())
    config["dataset"]["if_missing"] = "stand_in"  # the config allowed a stand-in; only the summary would say
    (run / run_files.CONFIG).write_text(yaml.safe_dump(config))
    write_run(tmp_path / "killed_cls", SyntheticRun("topk", 2, status="running", steps=8, epochs=2))
    # A summary without `task` (an older runner's) that logged perplexity: a language model.
    write_run(tmp_path / "old_lm", SyntheticRun("topk", 2, task="language_model", legacy=True, steps=8, epochs=2))
    runs = load_runs(tmp_path, cache=False).runs.set_index("name")
    assert runs.loc["killed_lm", "task_metric"] == "eval/perplexity"
    assert runs.loc["killed_lm", "data_source"].startswith("stand-in: possibly")
    assert runs.loc["killed_cls", ["task_metric", "data_source"]].tolist() == ["eval/accuracy", "real"]
    assert runs.loc["old_lm", ["task", "task_metric", "higher_is_better", "data_source"]].tolist() == [
        "language_model", "eval/perplexity", False, "real"]


def test_metric_specs() -> None:
    assert task_metric("eval/accuracy").format(0.9123) == "91.23%"
    assert task_metric("eval/perplexity").format(123.456) == "123.46"
    assert task_metric("eval/perplexity").title == PERPLEXITY
    assert task_metric("eval/hr20").title == "HR@20" and task_metric("eval/hr20").percent
    assert task_metric("eval/bleu").title == "bleu"
    assert task_metric("eval/bleu", higher_is_better=False).title == "bleu (lower is better)"
