"""Selection cost against W: the partition methods' per-worker selection time falls about as
1/W, a whole-vector top-k's does not.

Statistic: per method, context and density, the slope b of the least-squares line through
(log W, log t_W), where t_W is the mean over seeds of each run's median `time/select_ms_max`
over its logged steps after warm-up (the slowest rank: the step waits for it).
"""
from __future__ import annotations

import numpy as np

from analysis.claims.claim import Claim, Numbers, Statistic, finite
from analysis.claims.numbers import at
from analysis.claims.papers import DEFT, EXDYNA, MICRO, NAMES, SCALECOM, experiment
from analysis.claims.study import Study, method_groups, per_workers, subject
from experiments.runformat import metric_keys as keys

# The partition methods scan N/W elements per worker, so the ideal slope is -1. Fixed costs per
# step (kernel launches, the threshold update, DEFT's leader plan, which select_ms_max includes
# and which does not shrink with W) flatten the curve at large W: a slope down to -0.5 (the cost
# still halves when W quadruples) counts as falling "about as 1/W". Steeper than -1.3 would mean
# something other than the partition size is changing (a cache effect), not the claimed 1/W.
FALLS = (-1.3, -0.5)
# A top-k over all N elements costs the same at every W: slope 0. Above -0.2 (at most 13% less
# per doubling of W) allows timing noise and memory effects but not a cost that shrinks with W.
FLAT_ABOVE = -0.2
# Timings compare only within the study built for them: a convergence sweep's small model would
# give a fit dominated by fixed per-call costs (Claim.studies).
STUDIES = ("selection_time", "selection_replay")  # the paper sweep, or make reproduce's replay


def select_slopes(study: Study, sparsifier: str) -> Statistic:
    """Per (method, context, density): the log-log slope of selection time against W."""
    name = NAMES[sparsifier]
    runs = study.runs_of(sparsifier)
    if runs.empty:
        return Statistic(gaps=(f"no finished {name} runs",))
    if not study.has(keys.SELECT_MAX):
        return Statistic(gaps=(f"{keys.SELECT_MAX} is not logged",))
    times = study.timed(keys.SELECT_MAX)
    subjects, gaps = {}, []
    for (method, context, density), group in method_groups(runs):
        per_w = per_workers(group, times)
        per_w = per_w[per_w > 0]  # a log needs a positive time
        label = subject(method, context, density)
        if len(per_w) < 2:
            seen = sorted(int(w) for w in group["workers"].unique())
            gaps.append(f"{label}: no {name} runs at two or more worker counts with timed steps after warm-up (W={seen})")
            continue
        slope = float(np.polyfit(np.log(per_w.index.to_numpy(dtype=float)), np.log(per_w.to_numpy()), 1)[0])
        subjects[label] = {"slope": slope, **{at("ms", w): float(t) for w, t in per_w.items()}}
    return Statistic(subjects, tuple(gaps))


def falls(numbers: Numbers) -> bool:
    slope = numbers["slope"]
    return finite(slope) and FALLS[0] <= slope <= FALLS[1]


def flat(numbers: Numbers) -> bool:
    slope = numbers["slope"]
    return finite(slope) and slope > FLAT_ABOVE


_NEEDS = ("{name} runs at two or more worker counts (same model, data and density), logging "
          f"{keys.SELECT_MAX} on steps after warmup_steps ({experiment('selection_time')})")
_STATISTIC = (f"slope of log(select ms) against log(W), least squares; select ms: median {keys.SELECT_MAX} over "
              "logged steps after warm-up, mean over seeds, per W")
_SOURCES = {
    "deft": f"{DEFT}, abstract: 'the computational cost can be reduced as the number of workers increases'",
    "micro": f"{MICRO}, abstract: 'each worker then selects gradients from its partition' (near-zero cost)",
    "exdyna": f"{EXDYNA}, abstract: 'each worker selects gradients in its exclusively allocated partition'",
    "topk": f"{DEFT}, abstract: existing sparsifiers, 'wherein every worker selects gradients among all gradients'",
    "cltk": f"{SCALECOM}: the cyclic leader selects its top-k over the whole gradient; {DEFT} and {MICRO} compare against it",
}


def falling(sparsifier: str) -> Claim:
    name = NAMES[sparsifier]
    return Claim(
        id=f"selection.{sparsifier}",
        wording=f"{name}'s per-worker selection time falls about as 1/W.",
        source=_SOURCES[sparsifier],
        needs=_NEEDS.format(name=name),
        statistic=_STATISTIC,
        criterion=f"slope in [{FALLS[0]}, {FALLS[1]}] for every method, context and density measured",
        measure=lambda study: select_slopes(study, sparsifier),
        holds=falls,
        studies=STUDIES,
    )


def not_falling(sparsifier: str) -> Claim:
    name = NAMES[sparsifier]
    return Claim(
        id=f"selection.{sparsifier}",
        wording=f"{name}'s per-worker selection time does not fall with W (every selection covers the whole gradient).",
        source=_SOURCES[sparsifier],
        needs=_NEEDS.format(name=name),
        statistic=_STATISTIC,
        criterion=f"slope > {FLAT_ABOVE} for every method, context and density measured",
        measure=lambda study: select_slopes(study, sparsifier),
        holds=flat,
        studies=STUDIES,
    )


CLAIMS = [falling("deft"), falling("micro"), falling("exdyna"), not_falling("topk"), not_falling("cltk")]
