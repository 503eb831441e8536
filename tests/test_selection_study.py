"""The selection-cost study of `make reproduce` (experiments/studies/reproduce/selection.py), in its quick
version (an MLP, W = 2 and 4, a few steps): the run directories it writes are finished runs the
analysis loads, the claims' selection statistic is measurable on them in both kernel contexts,
the timed rows are the continuation of the settle trajectory on the path each run names, and the
two kernel paths select identically on the same accumulators."""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from analysis.claims.judge import judge_tables
from analysis.claims.numbers import by_workers
from analysis.claims.selection import select_slopes
from analysis.claims.study import Study
from analysis.load import load_runs
from experiments.runformat import metric_keys as keys
from experiments.runformat.run_dir import METRICS
from experiments.studies.reproduce import selection
from sparsifiers.common.kernels import compiled_available
from sparsifiers.common.threshold_control import next_threshold

pytestmark = pytest.mark.slow  # about 15-20 s on 2 busy cores

QUICK = selection.QUICK
SPLIT = ("cltk", "deft", "micro", "exdyna")


def settle_of(method: str) -> int:
    return selection.per_method(QUICK["settle_steps"], method, selection.SETTLE_STEPS, selection.DEFAULT_SETTLE)


def timed_of(method: str) -> int:
    return selection.per_method(QUICK["timed_steps"], method, selection.TIMED_STEPS, selection.DEFAULT_TIMED)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("selection") / "study"
    lines: list[str] = []
    measured, paths = selection.selection_study(
        out, QUICK["workers"], selection.METHODS, selection.DENSITY, QUICK["settle_steps"], QUICK["timed_steps"],
        QUICK["model"], selection.DATASET, QUICK["pool_size"], lines.append)
    return out, measured, paths, lines, load_runs(out, cache=False)


def rows_of(tables, run_dir) -> pd.DataFrame:
    steps = tables.steps[tables.steps["run_id"] == str(run_dir)]
    return steps.sort_values("step").reset_index(drop=True)


def test_the_replay_goes_to_the_gpu_when_there_is_one_unless_forced_to_the_cpu():
    assert selection.study_device("auto", cuda_available=True) == "cuda"
    assert selection.study_device("auto", cuda_available=False) == "cpu"
    assert selection.study_device("cpu", cuda_available=True) == "cpu"
    with pytest.raises(ValueError, match="no GPU here"):
        selection.study_device("cuda", cuda_available=False)
    cuda = selection.run_overrides("micro", 4, "auto", 1, 1, "mlp", "fashion_mnist", 0.001, device="cuda")
    assert "device=cuda" in cuda and "device=cpu" not in cuda


def test_it_writes_finished_runs_with_the_composed_config(study):
    out, measured, paths, lines, tables = study
    runs = tables.runs.set_index("run_id")
    workers, methods = QUICK["workers"], selection.METHODS
    assert len(paths) == len(runs) == 2 * len(workers) * len(methods)
    assert set(runs["status"]) == {"done"}
    assert sorted(runs["cfg.kernels"].value_counts().items()) == [("auto", len(paths) // 2), ("torch", len(paths) // 2)]
    for path in paths:
        run = runs.loc[str(path)]
        method, w = run["sparsifier"], int(run["workers"])
        assert path.name == f"{method}_w{w}_{run['cfg.kernels']}"
        assert (run["model"], run["dataset"], run["cfg.tag"]) == (QUICK["model"], "fashion_mnist", selection.TAG)
        # On the GPU when there is one (the claims judged there), recorded in config and env.json.
        assert (run["processes"], run["world"], run["cfg.device"]) == (1, "hosted", selection.study_device())
        assert run["env.device"] == selection.study_device()
        assert run["density"] == selection.DENSITY and run["k_target"] == math.floor(selection.DENSITY * run["numel"])
        assert run["warmup_steps"] == settle_of(method)
        assert run["cfg.max_steps"] == settle_of(method) + 2 * timed_of(method)
        assert run["data_source"] == "real"
    # the knobs the study sets are in the config, where the method label reads them
    assert set(runs.loc[runs["sparsifier"].isin(["micro", "exdyna"]), "cfg.sparsifier.threshold_start"]) == {"calibrated"}
    assert set(runs.loc[runs["sparsifier"] == "cltk", "cfg.sparsifier.select_on"]) == {"leader"}
    # one progress line per (method, W), with both paths' medians
    per_pair = [line for line in lines if "median select ms max" in line]
    assert len(per_pair) == len(workers) * len(methods)
    assert all("torch" in line and "auto" in line for line in per_pair)


def test_the_selection_claims_are_measurable_in_both_kernel_contexts(study):
    out, measured, paths, lines, tables = study
    claims_study = Study.of(tables)  # a study without evaluations: the selection study trains nothing
    assert claims_study.left_out == 0
    for method in selection.METHODS:
        statistic = select_slopes(claims_study, method)
        assert not statistic.gaps, statistic.gaps
        labels = sorted(statistic.subjects)
        assert len(labels) == 2 and "kernels=auto" in labels[0] and "kernels=torch" in labels[1], labels
        for numbers in statistic.subjects.values():
            assert math.isfinite(numbers["slope"])
            assert [w for w, ms in by_workers(numbers, "ms") if ms > 0] == list(QUICK["workers"])
    verdicts, _ = judge_tables(tables)
    judged = {verdict.claim.id: verdict for verdict in verdicts}
    for method in selection.METHODS:
        verdict = judged[f"selection.{method}"]
        assert verdict.outcome.name != "NOT_MEASURABLE", verdict.reason
        assert len(verdict.measured) == 2


def test_timed_rows_continue_the_settled_trajectory_on_their_own_path(study):
    out, measured, paths, lines, tables = study
    by_pair = {(one.method, one.workers): one for one in measured}
    for (method, w), one in by_pair.items():
        settle, timed = settle_of(method), timed_of(method)
        torch_dir, auto_dir = (out / f"{method}_w{w}_{kernels}" for kernels in selection.KERNEL_PATHS)
        torch_rows, auto_rows = rows_of(tables, torch_dir), rows_of(tables, auto_dir)
        for rows, first in ((torch_rows, settle), (auto_rows, settle + 1)):
            settle_rows, timed_rows = rows[rows["step"] < settle], rows[rows["step"] >= settle]
            assert list(settle_rows["step"]) == list(range(settle))  # every settle step, untimed
            assert settle_rows[keys.SELECT_MAX].isna().all()
            assert list(timed_rows["step"]) == list(range(first, settle + 2 * timed, 2))  # its own path's steps
            assert (timed_rows[keys.SELECT_MAX] > 0).all() and timed_rows[keys.RESIDUAL].notna().all()
        # one trajectory: both directories hold the same settle rows
        for key in (keys.DENSITY_ERROR, keys.BUILDUP, keys.SENT_MEAN):
            np.testing.assert_array_equal(torch_rows[torch_rows["step"] < settle][key].to_numpy(),
                                          auto_rows[auto_rows["step"] < settle][key].to_numpy())
        timed_rows = pd.concat([torch_rows[torch_rows["step"] >= settle], auto_rows[auto_rows["step"] >= settle]])
        assert one.settled_error == pytest.approx(float(np.mean(timed_rows[keys.DENSITY_ERROR])))
        if method in SPLIT:  # disjoint selections or one index set: no build-up on any timed step
            assert np.allclose(timed_rows[keys.BUILDUP].to_numpy(), 1.0)
        if method in ("micro", "exdyna"):
            # The controller runs on without a reset from the settle into the timed steps: every
            # step's lambda is MiCRO's rule applied to the step before's lambda and |U|. (The quick
            # version's MLP is far from settled after 20 steps; the full study reports its band.)
            trajectory = pd.concat([torch_rows, auto_rows[auto_rows["step"] >= settle]]).sort_values("step")
            assert list(trajectory["step"]) == list(range(settle + 2 * timed))
            k = int(tables.runs.set_index("run_id").loc[str(torch_dir), "k_target"])
            thresholds = trajectory[keys.THRESHOLD].to_numpy()
            aggregated = np.rint(k * (1.0 + trajectory[keys.DENSITY_ERROR].to_numpy())).astype(int)
            for t in range(1, len(thresholds)):
                expected = next_threshold(thresholds[t - 1], int(aggregated[t - 1]), k, "official")
                assert thresholds[t] == pytest.approx(expected, rel=1e-12)


@pytest.fixture(scope="module")
def pool() -> selection.GradientPool:
    cfg = selection.compose_run(selection.run_overrides("topk", 4, "torch", 0, 1, QUICK["model"], selection.DATASET,
                                                        selection.DENSITY))
    return selection.gradient_pool(cfg, QUICK["pool_size"])


@pytest.mark.parametrize("method", selection.METHODS)
def test_the_two_kernel_paths_select_identically_on_the_same_accumulators(method, pool):
    """From one state (6 steps in), one step on each path: the same selections, residuals,
    aggregate and method state on every rank, so the study's one trajectory does not depend on
    which path ran a step."""
    assert compiled_available()  # else `auto` would take the torch path too and prove nothing
    cfg = selection.compose_run(selection.run_overrides(method, 4, "torch", 0, 1, QUICK["model"], selection.DATASET,
                                                        selection.DENSITY))
    replay = selection.Replay(cfg, pool)
    for step in range(6):
        replay.step(step, "auto", measured=False)
    twin = copy.deepcopy(replay, memo={id(pool): pool})
    ours, theirs = replay.step(6, "torch", measured=True), twin.step(6, "auto", measured=True)
    assert (ours.kernels, theirs.kernels) == ("torch", "auto")
    for mine, other in zip(ours.outcome.selections, theirs.outcome.selections, strict=True):
        assert torch.equal(torch.sort(mine).values, torch.sort(other).values)
    for mine, other in zip(replay.ranks.residuals, twin.ranks.residuals, strict=True):
        assert torch.equal(mine, other)
    assert torch.equal(replay.ranks.out, twin.ranks.out)
    for mine, other in zip(replay.ranks.sparsifiers, twin.ranks.sparsifiers, strict=True):
        assert mine.state_dict() == other.state_dict()
    assert ours.metrics[keys.DENSITY_ERROR] == theirs.metrics[keys.DENSITY_ERROR]


def untimed_rows(run_dir) -> list[dict]:
    """A run's logged rows without what a clock measured (time/*: select, step, elapsed)."""
    return [{key: value for key, value in json.loads(line).items() if not key.startswith("time/")}
            for line in (run_dir / METRICS).read_text().splitlines()]


def test_a_reused_pool_gives_the_runs_a_fresh_pool_gives(tmp_path, monkeypatch):
    """make compare's battery runs one study per method in one process, each on the pool the
    first built (shared_gradient_pool): a study on the reused pool writes every untimed number a
    study on a freshly built pool writes, and a method that owns momentum (DGC: its pool's SGD has
    none) gets a pool of its own."""
    monkeypatch.setattr(selection, "_pools", {})
    methods, workers = ("micro",), (2,)

    def study(name: str, methods=methods) -> tuple[Path, list[str]]:
        lines: list[str] = []
        selection.selection_study(tmp_path / name, workers, methods, selection.DENSITY, 3, 2, QUICK["model"],
                                  selection.DATASET, QUICK["pool_size"], lines.append)
        return tmp_path / name, [line for line in lines if line.startswith("pool:")]

    built, built_says = study("built")
    reused, reused_says = study("reused")
    selection._pools.clear()
    fresh, fresh_says = study("fresh")
    assert "reused" in reused_says[0] and "reused" not in built_says[0] and "reused" not in fresh_says[0]
    for run_dir in sorted(fresh.iterdir()):
        assert untimed_rows(reused / run_dir.name) == untimed_rows(run_dir), run_dir.name
    _, dgc_says = study("dgc", ("dgc",))
    assert "reused" not in dgc_says[0] and len(selection._pools) == 2
    # No registered method draws from torch's global generator; one that did would draw after a
    # reused pool what it would after a fresh one.
    selection._pools.clear()
    cfg = selection.compose_run(selection.run_overrides("micro", 2, "torch", 0, 1, QUICK["model"], selection.DATASET,
                                                        selection.DENSITY))
    _, reused = selection.shared_gradient_pool(cfg, QUICK["pool_size"])
    after_build = torch.rand(3)
    torch.rand(5)  # anything drawn in between
    _, reused_now = selection.shared_gradient_pool(cfg, QUICK["pool_size"])
    assert (reused, reused_now) == (False, True) and torch.equal(torch.rand(3), after_build)
