"""Density control: MiCRO's and ExDyna's threshold holds |U| near k once settled, while the hard
threshold's and SAGE's drift away from it.

Statistic: per method, context, density and W, the settled density error: the mean of
`density/error` (|U|/k - 1) over the later half of a run's logged rows that hold one (the
report's `density/error_settled`, Reduction.MEAN_LATER_HALF), mean over seeds. A run whose later
half is too short or too early to be settled (analysis.claims.study: fewer than
SETTLED_MIN_ROWS rows, or starting before step SETTLED_FROM_STEP) is left out and said so.
"""
from __future__ import annotations

import numpy as np

from analysis.claims.claim import Claim, Numbers, Statistic, finite
from analysis.claims.papers import EXDYNA, MICRO, NAMES, LAPTOP_STATISTICS, experiment
from analysis.claims.study import SETTLED_FROM_STEP, SETTLED_MIN_ROWS, Study, method_groups, settled_rule, subject
from experiments.runformat import metric_keys as keys

# MiCRO's released rule raises lambda when rho = |U|/k > 1.1 and lowers it only below 1/1.1
# (docs/algorithms.md, micro): the controller's own band is |error| <= 0.1 (about -0.09 to
# +0.1). Controlled: inside it. Drifting: outside it, where MiCRO's rule would have acted.
BAND = 0.1

SETTLED_RULE = settled_rule(keys.DENSITY_ERROR)

STUDIES = ("density_vs_step", "compression_error", LAPTOP_STATISTICS)  # training runs long enough to settle


def settled_error(study: Study, sparsifier: str, key: str = keys.DENSITY_ERROR) -> Statistic:
    """Per (method, context, density, W): the mean over seeds of each settled run's mean of
    `key` over its settled rows, with how many rows and from which step."""
    name = NAMES[sparsifier]
    runs = study.runs_of(sparsifier)
    if runs.empty:
        return Statistic(gaps=(f"no finished {name} runs",))
    settled = study.settled(key)
    subjects, gaps = {}, []
    for (method, context, density, workers), group in method_groups(runs, by_workers=True):
        label = subject(method, context, density, workers)
        rows = settled.reindex(group["run_id"])
        if not rows["rows"].gt(0).any():
            gaps.append(f"{label}: no logged {key}")
            continue
        usable = rows[rows["ok"].astype(bool) & np.isfinite(rows["value"].astype(float))]
        if usable.empty:
            longest = rows.sort_values("rows").iloc[-1]
            gaps.append(f"{label}: no settled steps: the later half of the logged {key} holds {int(longest['rows'])} rows "
                        f"from step {longest['from_step']:g} (needs >= {SETTLED_MIN_ROWS} rows from step >= {SETTLED_FROM_STEP})")
            continue
        subjects[label] = {
            "settled": float(usable["value"].astype(float).mean()),
            "settled rows": float(usable["rows"].min()),
            "from step": float(usable["from_step"].max()),
            "seeds": float(len(usable)),
        }
    return Statistic(subjects, tuple(gaps))


def controlled(numbers: Numbers) -> bool:
    error = numbers["settled"]
    return finite(error) and abs(error) <= BAND


def drifts(numbers: Numbers) -> bool:
    error = numbers["settled"]
    return finite(error) and abs(error) > BAND


_CONTROL_SOURCES = {
    "micro": f"{MICRO}, abstract: 'MiCRO estimates the accurate threshold to maintain the communication traffic as per user requirement by minimising the compression ratio error'",
    "exdyna": f"{EXDYNA}, abstract: 'online threshold scaling, which estimates the accurate threshold of gradient selection on-the-fly'",
}
_DRIFT_SOURCE = (f"{MICRO}, abstract: traffic grows with an 'inappropriate threshold for gradient selection'; "
                 f"{EXDYNA}, abstract: 'inadequate sparsity control methods degrade the sparsification performance'")


def control_claim(sparsifier: str) -> Claim:
    name = NAMES[sparsifier]
    return Claim(
        id=f"density.{sparsifier}",
        wording=f"{name}'s threshold holds the aggregated count at k: its density error is near 0 once settled.",
        source=_CONTROL_SOURCES[sparsifier],
        needs=f"{name} runs logging {keys.DENSITY_ERROR} long enough to settle ({SETTLED_RULE}; {experiment('density_vs_step')})",
        statistic=f"settled density error: mean {keys.DENSITY_ERROR} over {SETTLED_RULE}, mean over seeds, per W",
        criterion=f"|settled error| <= {BAND} for every method, context, density and W measured",
        measure=lambda study: settled_error(study, sparsifier),
        holds=controlled,
        studies=STUDIES,
    )


def drift_claim(sparsifier: str) -> Claim:
    name = NAMES[sparsifier]
    return Claim(
        id=f"density.{sparsifier}",
        wording=f"The {name}'s density is not controlled: its settled density error stays away from 0." if sparsifier == "threshold"
        else f"{name}'s density is not controlled: its settled density error stays away from 0.",
        source=_DRIFT_SOURCE,
        needs=f"{name} runs logging {keys.DENSITY_ERROR} long enough to settle ({SETTLED_RULE}; {experiment('density_vs_step')})",
        statistic=f"settled density error: mean {keys.DENSITY_ERROR} over {SETTLED_RULE}, mean over seeds, per W",
        criterion=f"|settled error| > {BAND} (outside the band MiCRO's rule holds) for every method, context, density and W measured",
        measure=lambda study: settled_error(study, sparsifier),
        holds=drifts,
        studies=STUDIES,
    )


CLAIMS = [control_claim("micro"), control_claim("exdyna"), drift_claim("threshold"), drift_claim("sage")]
