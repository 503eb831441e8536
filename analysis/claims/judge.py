"""Judging: a claim's statistic on a study, then its criterion on each measured subject.

A run that diverged (analysis.divergence) is never averaged in. A claim that its method
converges (reaches dense, reaches a target sooner) counts it as a subject that fails, with the
step and reason it diverged at as its numbers (Statistic.failed, analysis/claims/diverged.py): a
diverged run is evidence that the method did not converge there. Every other claim that reads
its method names it in the verdict's reason ("diverged, left out: ..."), so such a claim whose
runs all diverged is NOT_MEASURABLE, never judged on their numbers. The rule that turns subjects into one verdict: NOT_MEASURABLE when no subject could be measured
(the reason says what the study lacks); otherwise DOES_NOT_HOLD when any measured subject fails
the criterion, HOLDS when every one passes. Subjects that could not be measured beside measured
ones are named in the verdict's reason, never silently dropped. Subjects a statistic reports
without judging (Statistic.reported) are in the verdict's numbers and in no count of held ones.
"""
from __future__ import annotations

import os
from typing import Iterable

from analysis.claims.claim import Claim, Outcome, Verdict
from analysis.claims.registry import CLAIMS
from analysis.claims.study import Study
from analysis.load import load_runs
from analysis.tables import RunTables


def judge(claim: Claim, study: Study) -> Verdict:
    """One claim on one study (on the runs of its own experiments, when the study has them)."""
    study, scope = study.scoped(claim.studies)
    study.start_reading()
    statistic = claim.measure(study)
    held = {name: bool(claim.holds(numbers)) for name, numbers in statistic.subjects.items()}
    held.update({name: False for name in statistic.failed})  # diverged: the method did not converge
    diverged = study.diverged_read()  # left out of the statistic: their numbers are no result
    gaps = "; ".join([*statistic.gaps, *([f"diverged, left out: {'; '.join(diverged)}"] if diverged else [])])
    if not held:
        return Verdict(claim, Outcome.NOT_MEASURABLE, {}, {}, gaps or "nothing in the study to measure", scope)
    outcome = Outcome.HOLDS if all(held.values()) else Outcome.DOES_NOT_HOLD
    # Reported subjects keep their numbers beside the judged ones, with no entry in `held`.
    measured = {**statistic.subjects, **statistic.failed, **statistic.reported}
    return Verdict(claim, outcome, measured, held, f"not measured: {gaps}" if gaps else "", scope)


def judge_study(study: Study, claims: Iterable[Claim] = CLAIMS) -> list[Verdict]:
    """Every claim on one study, in registry order."""
    return [judge(claim, study) for claim in claims]


def judge_tables(tables: RunTables, claims: Iterable[Claim] = CLAIMS) -> tuple[list[Verdict], Study]:
    """Every claim on the runs of loaded tables (analysis.load.load_runs)."""
    study = Study.of(tables)
    return judge_study(study, claims), study


def judge_paths(paths: Iterable[str | os.PathLike], cache: bool = True) -> tuple[list[Verdict], Study]:
    """Every claim on the runs at or below `paths` (run, sweep or output directories)."""
    return judge_tables(load_runs(list(paths), cache=cache))
