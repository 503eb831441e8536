"""The standard battery's verdicts: every method held to the same properties, with criteria
fixed in advance (docs/claims.md, "Every method against the field").

The papers' claims (the other modules here) are about one method each, in its paper's words.
These are the properties any method, a user's own included, is judged on beside every other
(`python -m experiments.studies.compare`): one Claim per property and method,
`generic.<property>.<name>`, measured by the papers' claims' own statistics (the selection
slope, |U|/k against W, the settled density error, the balance claim's settled imbalance, the
gap to dense), so a property and the paper claim it generalises read the same numbers. A
property a method cannot have (a dense baseline selects nothing; MiCRO is the balance claim's
reference) is NOT_MEASURABLE with "not applicable, because ...", never dropped; one the study
could not measure (a single W, runs too short to settle) says what is missing, as every claim does.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable

import pandas as pd

from analysis.claims import balance, convergence, density, selection, traffic
from analysis.claims.pays import PAYS_ABOVE, PerStep, break_even, pays_somewhere
from analysis.claims.claim import Claim, Numbers, Statistic, finite
from analysis.claims.numbers import at
from analysis.claims.papers import NAMES
from analysis.claims.study import Study, method_groups, per_workers, settled_rule, subject
from analysis.stats import t_interval
from experiments.runformat import metric_keys as keys
from sparsifiers import registry

PROPERTIES = ("selection", "buildup", "density", "traffic", "balance", "accuracy", "pays")
# No build-up: |U| at most k plus the band a threshold controller holds (MiCRO's rule, +-0.1,
# analysis.claims.density): a disjoint exchange of k selections gives exactly k, Top-k's union up to W k.
BUILDUP_LIMIT = 1.0 + density.BAND
# Traffic: the largest selection a rank sends, at most 1.25 k indices: the traffic claims' count
# band (a threshold controller's 1/1.1 to 1.1, 1.21 between its edges). Top-k sends exactly k, a
# partition method about k/W; twice k is a method that sends what it was not asked to.
TRAFFIC_LIMIT = traffic.COUNT_RATIO
# Balance: the balance claim's statistic and comparison, against MiCRO's fixed partitions (the
# method ExDyna's claim is judged against): no worse than MiCRO at the same W, context and density.
BALANCE_REFERENCE = registry.chosen("micro")[0]
SETTLED = settled_rule(keys.K_MAX)


def not_applicable(why: str) -> Statistic:
    """A property the method cannot have: no subject, the reason as the verdict's."""
    return Statistic(gaps=(f"not applicable, because {why}",))


def _selecting(name: str, measure: Callable[[Study], Statistic]) -> Callable[[Study], Statistic]:
    """`measure`, or not applicable for a method that sends every coordinate."""
    entry = registry.method(name)

    def measured(study: Study) -> Statistic:
        return measure(study) if entry.selects else not_applicable(f"{entry.title} sends every coordinate (it selects nothing)")

    return measured


def union_per_k(study: Study, name: str) -> Statistic:
    """|U|/k per W over the settled rows (the settled traffic count claim's statistic) and its
    largest over W, `worst`."""
    counted = traffic.count_vs_workers(study, name, settled=True)
    subjects = {label: {"worst |U|/k": max(value for key, value in numbers.items() if key.startswith("|U|/k@")),
                        **{key: value for key, value in numbers.items() if key != "ratio"}}
                for label, numbers in counted.subjects.items()}
    return Statistic(subjects, counted.gaps)


def indices_per_rank(study: Study, name: str) -> Statistic:
    """Per (method, context, density): the largest selection a rank sent (`selection/k_max`, mean
    over the settled rows, mean over seeds) over k, per W, and its largest over W."""
    runs = study.runs_of(name)
    if runs.empty:
        return Statistic(gaps=(f"no finished {NAMES[name]} runs",))
    rows = study.settled(keys.K_MAX)
    values = rows["value"].where(rows["ok"].astype(bool))
    subjects, gaps = {}, []
    for (method, context, dens), group in method_groups(runs):
        label, k = subject(method, context, dens), traffic.k_of(group)
        per_w = per_workers(group, values)
        if per_w.empty or not (finite(k) and k > 0):
            gaps.append(f"{label}: no settled {keys.K_MAX} or no k ({SETTLED}): run longer")
            continue
        gaps += traffic.unsettled_workers(label, keys.K_MAX, group, per_w)
        ratios = per_w / k
        subjects[label] = {"worst k_max/k": float(ratios.max()), **{at("k_max/k", w): float(v) for w, v in ratios.items()}}
    return Statistic(subjects, tuple(gaps))


def imbalance_against_reference(study: Study, name: str) -> Statistic:
    """Per (method, context, density, W): the settled load imbalance (the balance claim's
    statistic) beside MiCRO's at the same place."""
    if name == BALANCE_REFERENCE:
        return not_applicable(f"{NAMES[name]}'s fixed partitions are the reference every method is held to")
    own, reference = balance.settled_means(study, name), balance.settled_means(study, BALANCE_REFERENCE)
    if not own:
        return Statistic(gaps=(f"no settled {keys.LOAD_IMBALANCE} of {NAMES[name]} at W >= 2 ({settled_rule(keys.LOAD_IMBALANCE)})",))
    subjects, gaps = {}, []
    for place in sorted(own, key=str):
        context, dens, workers = place
        where = f"{context} | d={dens:g} | W={int(workers)}"
        if place not in reference:
            gaps.append(f"{where}: no settled {NAMES[BALANCE_REFERENCE]} imbalance there to compare with")
            continue
        for method, value, _ in own[place]:
            for other, reference_value, _ in reference[place]:
                subjects[f"{method} vs {other} | {where}"] = {"imbalance": value, NAMES[BALANCE_REFERENCE]: reference_value}
    return Statistic(subjects, tuple(gaps))


def seed_gaps(study: Study, runs: pd.DataFrame) -> dict[str, list[float]]:
    """Per subject of the convergence claims' gap: the gap to dense per seed, paired (dense's run
    of the same seed, context, W and task metric: both saw the same initialisation and data order),
    seeds without a finite pair left out."""
    finals, dense = study.final_metric(), study.runs_of("dense")
    per_subject = {}
    for (method, context, dens, workers), group in method_groups(runs, by_workers=True):
        baseline = dense[(dense["context"] == context) & (dense["workers"] == workers)
                         & (dense["task_metric"] == group["task_metric"].iloc[0])] if not dense.empty else dense
        dense_by_seed = dict(zip(baseline["seed"], finals.reindex(baseline["run_id"])))
        sign = 1.0 if convergence.higher_is_better(group) else -1.0
        gaps = [sign * (dense_by_seed[seed] - value) for seed, value in zip(group["seed"], finals.reindex(group["run_id"]))
                if seed in dense_by_seed and finite(value) and finite(dense_by_seed[seed])]
        per_subject[subject(method, context, dens, workers)] = gaps
    return per_subject


def accuracy_against_dense(study: Study, name: str) -> Statistic:
    """The convergence claims' gap to dense's final task metric, with the mean gap over paired
    seeds and its 95% t-interval (`gap low`, `gap high`: NaN from fewer than two seeds)."""
    if name == "dense":
        return not_applicable("dense is the baseline the others are held to")
    runs = study.runs_of(name)
    found = convergence.gaps_to_dense(study, runs, NAMES[name], study.diverged_of(name))
    paired = seed_gaps(study, runs)
    subjects = {}
    for label, numbers in found.subjects.items():
        gaps = paired.get(label, [])
        mean, low, high = t_interval(gaps) if gaps else (math.nan, None, None)
        subjects[label] = {**numbers, "seeds": float(len(gaps)), "paired gap": mean,
                           "gap low": math.nan if low is None else low, "gap high": math.nan if high is None else high}
    return replace(found, subjects=subjects)


# -- criteria: pure functions of one subject's numbers ------------------------------------------
def no_buildup(numbers: Numbers) -> bool:
    worst = numbers["worst |U|/k"]
    return finite(worst) and worst <= BUILDUP_LIMIT


def traffic_within(numbers: Numbers) -> bool:
    worst = numbers["worst k_max/k"]
    return finite(worst) and worst <= TRAFFIC_LIMIT


def balanced(numbers: Numbers) -> bool:
    own, reference = numbers["imbalance"], numbers[NAMES[BALANCE_REFERENCE]]
    return finite(own) and finite(reference) and own <= reference


# -- the claims ---------------------------------------------------------------------------------
BATTERY = "sparsebench's standard battery (docs/claims.md, 'Every method against the field')"


def _claim(prop: str, name: str, wording: str, generalises: str, needs: str, statistic: str, criterion: str,
           measure: Callable[[Study], Statistic], holds: Callable[[Numbers], bool], studies: tuple[str, ...]) -> Claim:
    return Claim(id=f"generic.{prop}.{name}", wording=wording.format(name=NAMES[name]),
                 source=f"{BATTERY}; generalises {generalises}", needs=needs.format(name=NAMES[name]),
                 statistic=statistic, criterion=criterion, measure=measure, holds=holds, studies=studies)


def claims_for(name: str, per_step: PerStep | None = None) -> list[Claim]:
    """The battery's properties for the registered method `name`, in PROPERTIES' order; "pays"
    reads `per_step`, the end-to-end model's cells (None: not modelled, NOT_MEASURABLE)."""
    registry.method(name)  # an unknown name fails here, naming the known ones
    low, high = selection.FALLS
    return [
        _claim("selection", name, "{name}'s per-worker selection time falls with W.", "selection.<m>",
               "{name} runs at two or more worker counts logging " + f"{keys.SELECT_MAX} after warm-up (the selection replay)",
               selection.CLAIMS[0].statistic, f"slope in [{low}, {high}] (the selection claims' 'falls about as 1/W')",
               _selecting(name, lambda study: selection.select_slopes(study, name)), selection.falls, selection.STUDIES),
        _claim("buildup", name, "{name} has no build-up: the aggregate holds at most 1.1 k coordinates at every W.",
               "buildup.<m> and traffic.count.settled.<m>",
               "{name} runs at two or more worker counts logging " + f"{keys.DENSITY_ERROR}, settled",
               f"|U|/k = 1 + mean {keys.DENSITY_ERROR} over {settled_rule(keys.DENSITY_ERROR)}, mean over seeds, per W; "
               "worst = the largest over W", f"worst |U|/k <= {BUILDUP_LIMIT:g}",
               _selecting(name, lambda study: union_per_k(study, name)), no_buildup, traffic.STUDIES),
        _claim("density", name, "{name}'s settled density is within 10% of its target.", "density.<m>",
               "{name} runs logging " + f"{keys.DENSITY_ERROR}, settled", density.CLAIMS[0].statistic,
               f"|settled error| <= {density.BAND} at every W, context and density measured",
               _selecting(name, lambda study: density.settled_error(study, name)), density.controlled, density.STUDIES),
        _claim("traffic", name, "{name} sends at most 1.25 k indices per rank.", "traffic.count.<m>",
               "{name} runs logging " + f"{keys.K_MAX}, settled",
               f"the largest selection of a rank, mean {keys.K_MAX} over {SETTLED}, mean over seeds, over k, per W; "
               "worst = the largest over W", f"worst k_max/k <= {TRAFFIC_LIMIT:g}",
               _selecting(name, lambda study: indices_per_rank(study, name)), traffic_within, traffic.STUDIES),
        _claim("balance", name, "{name}'s ranks are balanced: its selection load imbalance is no worse than MiCRO's.",
               "balance.exdyna", "{name} and MiCRO runs at the same W >= 2, logging " + f"{keys.LOAD_IMBALANCE}, settled",
               balance.CLAIMS[0].statistic, f"imbalance <= {NAMES[BALANCE_REFERENCE]}'s at every W, context and density where both are measured",
               _selecting(name, lambda study: imbalance_against_reference(study, name)), balanced, balance.CLAIMS[0].studies),
        _claim("accuracy", name, "{name} reaches dense's final accuracy within 1 point.", "convergence.dense.<m>",
               "{name} and dense runs at the same W, model, data and settings, evaluated to the end",
               convergence.CLAIMS[0].statistic, convergence.TOLERANCE_TEXT,
               lambda study: accuracy_against_dense(study, name), convergence.reaches, convergence.STUDIES),
        _claim("pays", name, "{name} pays somewhere on the default clusters: its per-step speedup over the best dense "
               "baseline is above 1 at some W, over the whole range of the model's inputs.", "make endtoend's break-even",
               "the ResNet-18 study's statistics runs of {name} and of the dense baselines (make compare's per-step part)",
               "per cluster and W = 4 to 1,024: the break-even (the best dense step over the method's, make endtoend's "
               "model) and its range over the eight moves; best low = the highest lower end over every cell",
               f"best low > {PAYS_ABOVE:g}", lambda study: break_even(per_step, name), pays_somewhere, ()),
    ]
