"""A diverged run as evidence against its method's convergence claims.

A run whose training diverged (analysis.divergence) did not converge: for a claim that the
method converges (reaches dense, reaches a target sooner), it is a subject that fails, never
left out (the claim would otherwise hold on the method's other runs) and never averaged into an
accuracy. Its numbers are the step and the reason it diverged at. Claims about anything else
leave it out and name it (analysis.claims.judge).
"""
from __future__ import annotations

import pandas as pd

from analysis.claims.study import Study, subject
from analysis.labels import format_knob
from experiments.runformat.divergence import parse

AT_STEP, WHY = "diverged at step", "why"


def failing(study: Study, rows: pd.DataFrame) -> dict[str, dict[str, float | str]]:
    """Per diverged run in `rows` (Study.diverged_of, narrowed to what the claim judges): its
    subject, "<method> | <context> | d=... | W=... | seed S", with the step and reason it diverged
    at. The runs are counted (Study.count_against): the claim names them in its numbers, not in
    its reason."""
    study.count_against(rows["run_id"])
    subjects = {}
    for row in rows.itertuples(index=False):
        found = parse(str(row.why)) or {"at_step": float("nan"), "why": str(row.why)}
        label = f"{subject(row.method, row.context, row.density, row.workers)} | seed {format_knob(row.seed)}"
        subjects[label] = {AT_STEP: float(found["at_step"]), WHY: found["why"]}
    return subjects
