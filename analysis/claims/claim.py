"""What a claim is, what its statistic returns, and what a judgement says.

A claim is data: its wording and source (which paper says it, and where), the study it needs, a
statistic computed from a study's loaded tables, and a criterion that decides, from the
statistic's numbers alone, whether the claim holds. The criterion is a pure function written
beside its text, so the code and docs/claims.md state the same rule.

A statistic measures one or more *subjects*: a method in a context at a density (a fit over
worker counts), or at one worker count too (a comparison at that W). Each subject gets a dict
of named numbers; what could not be measured is said in `gaps`, never raised.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping

if TYPE_CHECKING:  # the study wraps analysis tables; only its type is needed here
    from analysis.claims.study import Study

Numbers = Mapping[str, float]


@dataclass(frozen=True)
class Statistic:
    """A claim's measurement: subject -> its named numbers (in the order they read best), and the
    reasons a subject, or the whole claim, could not be measured. `reported`: subjects measured
    beside the judged ones but outside the claim's scope (Ok-Topk's released variant, against a
    bound that assumes the paper's algorithm): shown with their numbers, never judged. `failed`:
    subjects that fail whatever the criterion says (a convergence claim's diverged runs of its
    method, analysis/claims/diverged.py), with the step they diverged at and why."""

    subjects: dict[str, dict[str, float]] = field(default_factory=dict)
    gaps: tuple[str, ...] = ()
    reported: dict[str, dict[str, float]] = field(default_factory=dict)
    failed: dict[str, dict[str, float | str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Claim:
    """One testable claim of a paper.

    id: stable name (`selection.micro`); wording: the paper's claim in one sentence; source:
    paper and place; needs: the runs the study must hold and what they must log; statistic and
    criterion: what is measured and the rule, in words (docs/claims.md quotes them);
    measure: RunTables-derived Study -> Statistic; holds: one subject's numbers -> verdict,
    pure (a NaN number never satisfies it).
    """

    id: str
    wording: str
    source: str
    needs: str
    statistic: str
    criterion: str
    measure: Callable[["Study"], Statistic]
    holds: Callable[[Numbers], bool]
    studies: tuple[str, ...] = ()


class Outcome(str, enum.Enum):
    """A verdict: a result of the study, never an error."""

    HOLDS = "HOLDS"
    DOES_NOT_HOLD = "DOES_NOT_HOLD"
    NOT_MEASURABLE = "NOT_MEASURABLE"


@dataclass(frozen=True)
class Verdict:
    """A claim judged on one study: the outcome, every subject's numbers and whether it held,
    and `reason` (NOT_MEASURABLE: why; otherwise the subjects that could not be measured)."""

    claim: Claim
    outcome: Outcome
    measured: dict[str, dict[str, float]]
    held: dict[str, bool]
    reason: str = ""
    scope: str = ""  # which runs were judged, when the claim's own studies narrowed them


def finite(value: object) -> bool:
    """True for a number (numpy's too) that is neither NaN nor infinite; False for None or text."""
    try:
        return math.isfinite(value)  # type: ignore[arg-type]
    except TypeError:
        return False
