"""Convergence: the partition methods reach dense's final task metric within a tolerance, and
reach a common target sooner than Top-k and CLT-k at the same W and density.

The task metric is each run's own headline (`task_metric`: eval/accuracy, eval/perplexity,
eval/hr10, ...), its direction from the run's summary (`higher_is_better`), its value the last
evaluation (the report's rule: a non-finite last evaluation is missing, never replaced by an
earlier one, so a diverged run does not reach dense). A run of the method that diverged while
staying finite fails both claims as a subject of its own, named with its step and reason
(analysis/claims/diverged.py); a diverged dense, Top-k or CLT-k run is left out and named.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.claims.claim import Claim, Numbers, Statistic, finite
from analysis.claims.diverged import failing
from analysis.claims.papers import DEFT, EXDYNA, MICRO, NAMES, PAPER_OF, experiment
from analysis.claims.study import Study, method_groups, subject
from sparsifiers.registry import chosen
from experiments.runformat import metric_keys as keys

# "Within a tolerance of dense": the papers say comparable/high accuracy without a number.
# Accuracies (fractions): 1 point, several times the seed-to-seed spread of a CIFAR ResNet-18
# (a few tenths of a point), well below the gaps the papers report for failing baselines.
# Metrics without a common scale (perplexity, HR@K, NDCG@K, losses): 2% of dense's value.
ABSOLUTE_TOLERANCE = {keys.ACCURACY: 0.01, keys.TOP5: 0.01}
RELATIVE_TOLERANCE = 0.02
# Final metrics and times to a target compare runs given the same training budget: the
# convergence sweep's, not a timing sweep's few epochs (Claim.studies).
STUDIES = ("convergence",)


def tolerance(metric: str, dense_value: float) -> float:
    """How far below dense (above, for lower-is-better metrics) still counts as reaching it."""
    if metric in ABSOLUTE_TOLERANCE:
        return ABSOLUTE_TOLERANCE[metric]
    return RELATIVE_TOLERANCE * abs(dense_value)


def _direction(group: pd.DataFrame) -> bool:
    """True when higher is better for the group's task metric (the runs' summaries say)."""
    value = group["higher_is_better"].iloc[0] if "higher_is_better" in group.columns else True
    return True if value is None or pd.isna(value) else bool(value)


def _mean_keep_nan(values: pd.Series) -> float:
    """Mean over seeds; NaN when any seed's value is missing (a diverged seed is not averaged away)."""
    return float(values.mean(skipna=False)) if len(values) else float("nan")


def gaps_to_dense(study: Study, runs: pd.DataFrame, name: str, diverged: pd.DataFrame) -> Statistic:
    """Per (method, context, density, W) of `runs`: the final task metric (mean over seeds), the
    dense runs' at the same context and W (dense ignores the density), how much worse the method
    is (`gap`, positive: worse) and the tolerance. The method's `diverged` runs (Study.diverged_of)
    fail, each named with its step and reason."""
    failed = failing(study, diverged)
    if runs.empty:
        return Statistic(gaps=(f"no finished {name} runs that did not diverge",), failed=failed)
    dense = study.runs_of("dense")
    finals = study.final_metric()
    subjects, gaps = {}, []
    for (method, context, density, workers), group in method_groups(runs, by_workers=True):
        label = subject(method, context, density, workers)
        metric = group["task_metric"].iloc[0]
        baseline = dense[(dense["context"] == context) & (dense["workers"] == workers) & (dense["task_metric"] == metric)] \
            if not dense.empty else dense
        if baseline.empty:
            gaps.append(f"{label}: no dense run at the same W, model, data and settings")
            continue
        dense_value = _mean_keep_nan(finals.reindex(baseline["run_id"]))
        if not finite(dense_value):
            gaps.append(f"{label}: dense's last evaluation of {metric} is not finite")
            continue
        value = _mean_keep_nan(finals.reindex(group["run_id"]))
        worse = dense_value - value if _direction(group) else value - dense_value
        subjects[label] = {"final": value, "dense": dense_value, "gap": worse, "tolerance": tolerance(metric, dense_value)}
    return Statistic(subjects, tuple(gaps), failed=failed)


def reaches(numbers: Numbers) -> bool:
    gap, allowed = numbers["gap"], numbers["tolerance"]
    return finite(gap) and finite(allowed) and gap <= allowed


def _time_to(curve: pd.DataFrame, target: float, higher: bool) -> float:
    """Seconds (mean `time/elapsed_s`) at the first evaluation that reaches `target`; inf if none."""
    reached = curve["metric"] >= target if higher else curve["metric"] <= target
    hits = curve[reached.fillna(False).astype(bool)]
    return float(hits["elapsed"].iloc[0]) if len(hits) else float("inf")


# The baselines the papers' speed claims are measured against (the claims' choice, not a trait).
BASELINES = chosen("topk", "cltk")


def times_to_target(study: Study, sparsifier: str) -> Statistic:
    """Per (method, context, density, W): the target (the worst final task metric among the
    method, Top-k and CLT-k there: a level each of them reaches) and the seconds each takes to
    reach it (Top-k and CLT-k: their fastest method label). The method's diverged runs fail, each
    named with its step and reason (they reach no target)."""
    name = NAMES[sparsifier]
    runs, failed = study.runs_of(sparsifier), failing(study, study.diverged_of(sparsifier))
    if runs.empty:
        return Statistic(gaps=(f"no finished {name} runs that did not diverge",), failed=failed)
    baselines = study.runs_of(*BASELINES)
    subjects, gaps = {}, []
    for (method, context, density, workers), group in method_groups(runs, by_workers=True):
        label = subject(method, context, density, workers)
        metric, higher = group["task_metric"].iloc[0], _direction(group)
        same = baselines[(baselines["context"] == context) & (baselines["density"] == density)
                         & (baselines["workers"] == workers) & (baselines["task_metric"] == metric)] \
            if not baselines.empty else baselines
        absent = [NAMES[b] for b in BASELINES if same.empty or not (same["sparsifier"] == b).any()]
        if absent:
            gaps.append(f"{label}: no {' or '.join(absent)} run at the same W, density, model, data and settings")
            continue
        curves = {("self", method): study.curve(list(group["run_id"]), metric)}
        for (family, other), rows in same.groupby(["sparsifier", "method"], sort=True):
            curves[(family, other)] = study.curve(list(rows["run_id"]), metric)
        if any(curve.empty or not np.isfinite(curve["elapsed"]).any() for curve in curves.values()):
            gaps.append(f"{label}: evaluations without {keys.ELAPSED} (or none) for {name}, Top-k or CLT-k")
            continue
        finals = [float(curve["metric"].iloc[-1]) for curve in curves.values()]
        finals = [value for value in finals if finite(value)]
        if not finals:
            gaps.append(f"{label}: no finite last evaluation of {metric} among {name}, Top-k and CLT-k")
            continue
        target = min(finals) if higher else max(finals)
        times = {key: _time_to(curve, target, higher) for key, curve in curves.items()}
        fastest = {family: min(t for (f, _), t in times.items() if f == family) for family in BASELINES}
        subjects[label] = {"target": target, "s": times[("self", method)],
                           "Top-k s": fastest["topk"], "CLT-k s": fastest["cltk"]}
    return Statistic(subjects, tuple(gaps), failed=failed)


def sooner(numbers: Numbers) -> bool:
    own = numbers["s"]
    return finite(own) and own < numbers["Top-k s"] and own < numbers["CLT-k s"]


_REACH_SOURCES = {
    "deft": f"{DEFT}, abstract: 'while achieving high convergence performance'",
    "micro": f"{MICRO}, abstract: 'MiCRO outperformed state-of-the-art sparsifiers with an outstanding convergence rate'",
    "exdyna": f"{EXDYNA}, abstract, last sentences (paraphrased, not checked word for word): faster training than "
              "state-of-the-art sparsifiers at high accuracy",
}
TOLERANCE_TEXT = (f"gap = how much worse than dense's final (mean over seeds) <= tolerance: "
                   f"{ABSOLUTE_TOLERANCE[keys.ACCURACY]:g} absolute for accuracy and top-5 (1 point), "
                   f"{RELATIVE_TOLERANCE:.0%} of dense's value for other metrics (perplexity, HR@K, NDCG@K)")

DIVERGED_TEXT = "a run of the method that diverged fails, named with the step and reason it diverged at"


def reach_claim(sparsifier: str) -> Claim:
    name = NAMES[sparsifier]
    return Claim(
        id=f"convergence.dense.{sparsifier}",
        wording=f"{name} reaches the dense baseline's final task metric at the study's density.",
        source=_REACH_SOURCES[sparsifier],
        needs=f"{name} and dense runs at the same W, model, data and settings, evaluated to the end ({experiment('convergence')})",
        statistic="final task metric (last evaluation, mean over seeds) of the method and of dense, per W and density",
        criterion=TOLERANCE_TEXT + ", at every W, context and density measured; " + DIVERGED_TEXT,
        measure=lambda study: gaps_to_dense(study, study.runs_of(sparsifier), name, study.diverged_of(sparsifier)),
        holds=reaches,
        studies=STUDIES,
    )


def sooner_claim(sparsifier: str) -> Claim:
    name = NAMES[sparsifier]
    return Claim(
        id=f"convergence.sooner.{sparsifier}",
        wording=f"{name} reaches a target task metric in less training time than Top-k and CLT-k.",
        source=f"{PAPER_OF[sparsifier]}, abstract (training speed over state-of-the-art sparsifiers); "
               f"the claim of {experiment('convergence')}",
        needs=f"{name}, Top-k and CLT-k runs at the same W, density, model, data and settings, with "
              f"{keys.ELAPSED} in their evaluation rows ({experiment('convergence')})",
        statistic=f"target = the worst final task metric among {name}, Top-k and CLT-k (a level each reaches); "
                  f"s = mean {keys.ELAPSED} over seeds at the first evaluation reaching it (Top-k, CLT-k: fastest label)",
        criterion=f"{name}'s s < Top-k's s and < CLT-k's s at every W, context and density measured; " + DIVERGED_TEXT,
        measure=lambda study: times_to_target(study, sparsifier),
        holds=sooner,
        studies=STUDIES,
    )


CLAIMS = [reach_claim("deft"), reach_claim("micro"), reach_claim("exdyna"),
          sooner_claim("deft"), sooner_claim("micro"), sooner_claim("exdyna")]
