"""Load balance: ExDyna's moving partitions give a lower load imbalance than MiCRO's fixed ones
at the same W.

`selection/load_imbalance` = W max_r |S_r| / sum_r |S_r| - 1: the padding the index all-gather
pays for the busiest worker (docs/metrics.md). ExDyna moves its partition boundaries block by
block from step 1 on, so the comparison uses settled values (the later half of the logged rows,
as the settled density error; analysis.claims.study).
"""
from __future__ import annotations

import numpy as np

from analysis.claims.claim import Claim, Numbers, Statistic, finite
from analysis.claims.papers import EXDYNA, LAPTOP_STATISTICS, experiment
from analysis.claims.study import SETTLED_FROM_STEP, SETTLED_MIN_ROWS, Study, method_groups
from experiments.runformat import metric_keys as keys


def settled_means(study: Study, sparsifier: str) -> dict[tuple, list[tuple[str, float, int]]]:
    """(context, density, W) -> (method, mean settled imbalance over seeds, runs), for W >= 2."""
    runs = study.runs_of(sparsifier)
    if runs.empty:
        return {}
    settled = study.settled(keys.LOAD_IMBALANCE)
    means = {}
    for (method, context, density, workers), group in method_groups(runs[runs["workers"] >= 2], by_workers=True):
        rows = settled.reindex(group["run_id"])
        usable = rows[rows["ok"].astype(bool) & np.isfinite(rows["value"].astype(float))]
        if len(usable):
            means.setdefault((context, density, workers), []).append((method, float(usable["value"].mean()), len(usable)))
    return means


def imbalance_pairs(study: Study) -> Statistic:
    """Per (ExDyna label, MiCRO label, context, density, W): both settled imbalances."""
    exdyna, micro = settled_means(study, "exdyna"), settled_means(study, "micro")
    if not exdyna or not micro:
        missing = [name for name, found in (("ExDyna", exdyna), ("MiCRO", micro)) if not found]
        return Statistic(gaps=(f"no settled {keys.LOAD_IMBALANCE} of {' or '.join(missing)} at W >= 2 "
                               f"(needs finished runs whose later half of logged rows holds >= {SETTLED_MIN_ROWS} "
                               f"rows from step >= {SETTLED_FROM_STEP})",))
    subjects, gaps = {}, []
    for place in sorted(set(exdyna) | set(micro), key=str):
        context, density, workers = place
        if place not in exdyna or place not in micro:
            alone = "ExDyna" if place in exdyna else "MiCRO"
            gaps.append(f"{context} | d={density:g} | W={int(workers)}: settled imbalance of {alone} only")
            continue
        for ex_method, ex_value, _ in exdyna[place]:
            for mi_method, mi_value, _ in micro[place]:
                label = f"{ex_method} vs {mi_method} | {context} | d={density:g} | W={int(workers)}"
                subjects[label] = {"exdyna": ex_value, "micro": mi_value}
    return Statistic(subjects, tuple(gaps))


def exdyna_lower(numbers: Numbers) -> bool:
    ex, mi = numbers["exdyna"], numbers["micro"]
    return finite(ex) and finite(mi) and ex < mi


CLAIMS = [Claim(
    id="balance.exdyna",
    wording="ExDyna's load imbalance of gradient selection is below MiCRO's at the same W.",
    source=f"{EXDYNA}, abstract: 'to balance the workload of gradient selection between workers, ExDyna adjusts the topology of partitions'",
    needs=f"ExDyna and MiCRO runs at the same W >= 2, model, data and density, logging {keys.LOAD_IMBALANCE} long enough "
          f"to settle ({experiment('load_imbalance')})",
    statistic=f"settled {keys.LOAD_IMBALANCE}: mean over the later half of the logged rows (>= {SETTLED_MIN_ROWS} rows "
              f"from step >= {SETTLED_FROM_STEP}), mean over seeds, per method and W",
    criterion="ExDyna's < MiCRO's at every W, context and density where both are measured",
    measure=imbalance_pairs,
    holds=exdyna_lower,
    studies=("load_imbalance", LAPTOP_STATISTICS),
)]
