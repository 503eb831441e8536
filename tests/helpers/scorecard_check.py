"""Every scorecard measure computed again from a study's run folders, the plain way (config.yaml,
summary.json and metrics.jsonl read by tests/helpers/raw_runs.py, never through analysis.load),
following the rules docs/claims.md states for each generic verdict: the settled rows are the
later half of a run's rows holding the key, seeds averaged per W, the worst over W and kernel
paths; selection time is the median after warm-up and its slope a least-squares fit of logs. The
break-even is make endtoend's model's (its own tests price it by hand): read from its grid here."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from experiments.runformat import metric_keys as k
from experiments.runformat import run_dir as files
from tests.helpers.raw_runs import after_warmup, read_study


def runs_tagged(root: Path, tag: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, train rows) of the finished runs below `root` whose tag is `tag`, with each run's
    k (summary.json) and kernels (config.yaml)."""
    study = read_study(root)
    extra = {}
    for run in study.runs["run"]:
        config = yaml.safe_load((Path(run) / files.CONFIG).read_text())
        summary = json.loads((Path(run) / files.SUMMARY).read_text())
        extra[run] = {"tag": config["tag"], "k": summary.get("k_target"), "kernels": config["kernels"]}
    runs = study.runs.assign(**{name: study.runs["run"].map(lambda run, n=name: extra[run][n]) for name in ("tag", "k", "kernels")})
    runs = runs[(runs["tag"] == tag) & (runs["status"] == "done")]
    return runs, study.train[study.train["run"].isin(set(runs["run"]))]


def settled_per_w(runs: pd.DataFrame, train: pd.DataFrame, method: str, key: str) -> pd.Series:
    """W -> mean over seeds of each run's mean of `key` over the later half of its rows holding it."""
    values = {}
    for row in runs[runs["method"] == method].itertuples():
        logged = train[(train["run"] == row.run) & train[key].notna()].sort_values(k.ROW_STEP)[key].to_numpy(dtype=float)
        values.setdefault(row.workers, []).append(float(np.mean(logged[len(logged) // 2:])))
    return pd.Series({w: float(np.mean(v)) for w, v in values.items()}).sort_index()


def statistics_measures(root: Path, method: str) -> dict[str, float]:
    """buildup, density, traffic and balance of `method`, from its statistics runs."""
    runs, train = runs_tagged(root, "laptop/statistics")
    mine = runs[runs["method"] == method]
    k_target = float(mine["k"].iloc[0])
    error = settled_per_w(runs, train, method, k.DENSITY_ERROR)
    return {"buildup": float((1 + error).max()), "density": float(error.abs().max()),
            "traffic": float((settled_per_w(runs, train, method, k.K_MAX) / k_target).max()),
            "balance": float(settled_per_w(runs, train, method, k.LOAD_IMBALANCE).max())}


def selection_slope(root: Path, method: str) -> float:
    """The largest over kernel paths of the log-log slope of median select_ms_max after warm-up."""
    runs, train = runs_tagged(root, "laptop/selection_replay")
    late = after_warmup(train)
    slopes = []
    for kernels, group in runs[runs["method"] == method].groupby("kernels"):
        medians = {row.workers: float(late[late["run"] == row.run][k.SELECT_MAX].median()) for row in group.itertuples()}
        workers = sorted(medians)
        slopes.append(float(np.polyfit(np.log(workers), np.log([medians[w] for w in workers]), 1)[0]))
    return max(slopes)


def accuracy_gap(root: Path, method: str) -> float:
    """Dense's final accuracy (mean over seeds) less the method's, at the convergence sweep's W."""
    study = read_study(root)
    tags = {run: yaml.safe_load((Path(run) / files.CONFIG).read_text())["tag"] for run in study.runs["run"]}
    evals = study.evals[study.evals["run"].map(tags) == "laptop/convergence"].sort_values([k.ROW_STEP, k.ROW_EPOCH], kind="stable")
    final = evals.groupby("run").tail(1).groupby("method")[k.ACCURACY].mean()
    return float(final["dense"] - final[method])


def best_lows(root: Path, search: str) -> dict[str, float]:
    """Per method the end-to-end model prices, the highest lower end of its break-even over every
    default cluster and W, from the model of the quick battery's runs (compute and selection
    measured in them) (experiments/studies/
    endtoend/__main__.py's model_study, called here on its own; `search`: the test methods'
    hydra.searchpath, with them registered)."""
    from experiments.engine.core.network import NetworkModel
    from experiments.studies.endtoend.__main__ import NETWORKS, WORKERS, model_study
    from experiments.studies.endtoend.compute import ComputeProfile
    from experiments.studies.compare.pays import QUICK_PER_STEP, STEP, measured_step
    from experiments.studies.endtoend.studies import QUICKSTART

    folder = root / QUICKSTART.name
    assert (folder / STEP).is_file(), "the battery keeps the step it timed"
    grid = model_study(QUICKSTART, folder, [NetworkModel.preset(n) for n in NETWORKS], ComputeProfile.load("measured"),
                       list(WORKERS), quick=True, extra=(search,), step=measured_step(folder, QUICK_PER_STEP, (search,)))["grid"]
    lows: dict[str, float] = {}
    for cell in (cell for by_w in grid.values() for cells in by_w.values() for cell in cells):
        lows[cell.method] = max(lows.get(cell.method, cell.low), cell.low)
    return lows
