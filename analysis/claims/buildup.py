"""Build-up: the partition methods and CLT-k aggregate exactly what their workers selected
(|U| = sum_r |S_r|, `buildup` = 1), while Top-k's union grows with W.

`buildup` is logged at every logged step (docs/metrics.md): for scope `split` methods it is
(|U| - |C|) / sum_r |S_r|, 1 by construction when the selections are disjoint; for scope `whole`
methods (Top-k) it is (|U| - |C|) / mean_r |S_r|, between 1 and W.
"""
from __future__ import annotations

import numpy as np

from analysis.claims.claim import Claim, Numbers, Statistic, finite
from analysis.claims.numbers import at, by_workers
from analysis.claims.papers import DEFT, EXDYNA, MICRO, NAMES, SCALECOM, LAPTOP_STATISTICS, experiment
from analysis.claims.study import Study, method_groups, per_workers, subject
from experiments.runformat import metric_keys as keys
from experiments.runformat.headline import Reduction

# |U| and the counts are integers, so a disjoint exchange gives exactly 1; 1e-6 only absorbs
# the float division of a logged ratio.
EXACT = 1e-6

STUDIES = ("buildup_density", "selection_time", LAPTOP_STATISTICS)  # the papers' W sweeps of training runs


def deviation_from_one(study: Study, sparsifier: str) -> Statistic:
    """Per (method, context, density): the largest |buildup - 1| over every logged step of its
    runs at W >= 2 (at W = 1 there is nothing to build up)."""
    name = NAMES[sparsifier]
    runs = study.runs_of(sparsifier)
    runs = runs[runs["workers"] >= 2] if not runs.empty else runs
    if runs.empty:
        return Statistic(gaps=(f"no finished {name} runs at W >= 2",))
    subjects, gaps = {}, []
    for (method, context, density), group in method_groups(runs):
        label = subject(method, context, density)
        worst, rows = 0.0, 0
        for run_id in group["run_id"]:
            _, values = study.values(run_id, keys.BUILDUP)
            if values.size:
                worst = max(worst, float(np.max(np.abs(values - 1.0))))
                rows += values.size
        if rows == 0:
            gaps.append(f"{label}: no logged {keys.BUILDUP}")
            continue
        subjects[label] = {"max |buildup-1|": worst, "logged steps": float(rows),
                           "worker counts": float(group["workers"].nunique())}
    return Statistic(subjects, tuple(gaps))


def is_one(numbers: Numbers) -> bool:
    worst = numbers["max |buildup-1|"]
    return finite(worst) and worst <= EXACT


def growth(study: Study, sparsifier: str) -> Statistic:
    """Per (method, context, density): the mean build-up at each W (mean over logged steps,
    then over seeds)."""
    name = NAMES[sparsifier]
    runs = study.runs_of(sparsifier)
    if runs.empty:
        return Statistic(gaps=(f"no finished {name} runs",))
    means = study.reduced(keys.BUILDUP, Reduction.MEAN)
    subjects, gaps = {}, []
    for (method, context, density), group in method_groups(runs):
        label = subject(method, context, density)
        per_w = per_workers(group, means)
        if len(per_w) < 2 or per_w.index.max() < 2:
            seen = sorted(int(w) for w in group["workers"].unique())
            gaps.append(f"{label}: no {name} runs logging {keys.BUILDUP} at two or more worker counts, one of them >= 2 (W={seen})")
            continue
        subjects[label] = {at("buildup", w): float(value) for w, value in per_w.items()}
    return Statistic(subjects, tuple(gaps))


def grows(numbers: Numbers) -> bool:
    """Strictly increasing in W, and above 1 at every W >= 2."""
    pairs = by_workers(numbers, "buildup")
    values = [value for _, value in pairs]
    increasing = all(later > earlier for earlier, later in zip(values, values[1:]))
    above_one = all(value > 1.0 + EXACT for w, value in pairs if w >= 2)
    return bool(pairs) and all(finite(v) for v in values) and increasing and above_one


_SOURCES = {
    "deft": f"{DEFT}, abstract: 'gradient build-up can be eliminated because DEFT allows workers to select gradients in partitions that are non-intersecting'",
    "micro": f"{MICRO}, abstract: 'the aggregated gradients are free from gradient build-up'",
    "exdyna": f"{EXDYNA}, abstract: 'each worker selects gradients in its exclusively allocated partition so that gradient build-up never occurs'",
    "cltk": f"{SCALECOM}: every worker uses the cyclic leader's index set, so the aggregate holds exactly its k indices",
}


def free_of_buildup(sparsifier: str) -> Claim:
    name = NAMES[sparsifier]
    return Claim(
        id=f"buildup.{sparsifier}",
        wording=f"{name} has no gradient build-up: the aggregate holds exactly the workers' selections (|U| = sum_r |S_r|).",
        source=_SOURCES[sparsifier],
        needs=f"{name} runs at W >= 2 logging {keys.BUILDUP} ({experiment('buildup_density')})",
        statistic=f"largest |{keys.BUILDUP} - 1| over every logged step of every run at W >= 2",
        criterion=f"max |buildup-1| <= {EXACT:g} for every method, context and density measured",
        measure=lambda study: deviation_from_one(study, sparsifier),
        holds=is_one,
        studies=STUDIES,
    )


TOPK_GROWS = Claim(
    id="buildup.topk",
    wording="Top-k's aggregated union grows with W (gradient build-up).",
    source=f"{MICRO}, abstract: 'an increase in communication traffic is caused by gradient build-up'; "
           f"{DEFT}, abstract: 'increased communication traffic owing to gradient build-up'",
    needs=f"Top-k runs at two or more worker counts, one of them >= 2, logging {keys.BUILDUP} ({experiment('buildup_density')})",
    statistic=f"mean {keys.BUILDUP} over logged steps, mean over seeds, per W",
    criterion=f"strictly increasing in W, and > 1 + {EXACT:g} at every W >= 2, for every method, context and density measured",
    measure=lambda study: growth(study, "topk"),
    holds=grows,
    studies=STUDIES,
)

CLAIMS = [free_of_buildup("deft"), free_of_buildup("micro"), free_of_buildup("exdyna"), free_of_buildup("cltk"), TOPK_GROWS]
