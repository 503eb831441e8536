"""A method's scorecard: every measure of the standard battery with the method's rank among all
the methods a study holds, and each generic verdict (analysis/claims/generic.py).

One number per measure and method, the one its verdict hinges on: the worst over the verdict's
judged subjects (kernel paths, worker counts, contexts) of the subject's headline number. Every
measure is lower-is-better (a steeper fall of selection time, less |U| over k, a smaller density
error, fewer indices, less imbalance, a smaller gap to dense), so rank 1 is the best; methods
tied share a rank, and a method the verdict could not measure has no number and no rank.
Parts of the battery not built yet stay in the record as NOT_MEASURABLE with the reason.
"""
from __future__ import annotations

import math
from typing import Callable

import pandas as pd

from analysis import markdown
from analysis.claims.claim import Outcome, Verdict, finite
from analysis.claims.generic import PROPERTIES, claims_for
from analysis.claims.judge import judge_study
from analysis.claims.output import claim_records, number, verdict_text
from analysis.claims.papers import NAMES
from analysis.claims.study import Study

# Property -> (the measure's name, the subject number it reads, how it is turned into "less is better").
MEASURES: dict[str, tuple[str, str, Callable[[float], float]]] = {
    "selection": ("selection time slope against W", "slope", float),
    "buildup": ("largest |U| / k over W (settled)", "worst |U|/k", float),
    "density": ("largest |settled density error|", "settled", abs),
    "traffic": ("largest indices per rank / k (settled)", "worst k_max/k", float),
    "balance": ("largest settled load imbalance", "imbalance", float),
    "accuracy": ("largest gap to dense's final accuracy", "gap", float),
}
assert tuple(MEASURES) == PROPERTIES, "one measure per generic property"
# The parts of the battery that are not built yet, and why: stated, never faked.
NOT_BUILT = {
    "pays": "needs the per-step factor and the steps ratio that `make endtoend` is being rebuilt to give (issue 46): "
            "not measured by this battery yet",
}


def measure(verdict: Verdict, prop: str) -> float:
    """The worst of the judged subjects' headline number; NaN when none was measured."""
    _, key, turn = MEASURES[prop]
    values = [turn(numbers[key]) for name, numbers in verdict.measured.items() if name in verdict.held and key in numbers]
    values = [value for value in values if finite(value)]
    return max(values) if values else math.nan


def field(study: Study, methods: list[str]) -> dict[str, list[Verdict]]:
    """Every method's generic verdicts on one study, in PROPERTIES' order."""
    return {method: judge_study(study, claims_for(method)) for method in methods}


def ranks(values: dict[str, float]) -> dict[str, int | None]:
    """Competition ranks, lowest value first (1, 2, 2, 4); None for a missing value."""
    ranked = sorted(value for value in values.values() if finite(value))
    return {method: (ranked.index(value) + 1 if finite(value) else None) for method, value in values.items()}


def records(verdicts: dict[str, list[Verdict]], not_applicable: dict[str, dict[str, str]] | None = None,
            source: dict | None = None) -> dict[str, dict]:
    """Each method's JSON record: per measure its value, rank among the methods present, the
    verdict with its reason and numbers; the parts not built and the parts refused; `source`:
    where the runs were measured (analysis.measured.provenance: commit, machine, runs)."""
    values = {prop: {method: measure(found[i], prop) for method, found in verdicts.items()} for i, prop in enumerate(PROPERTIES)}
    placed = {prop: ranks(values[prop]) for prop in PROPERTIES}
    result = {}
    for method, found in verdicts.items():
        measures = {}
        for i, prop in enumerate(PROPERTIES):
            value = values[prop][method]
            measures[prop] = {"measure": MEASURES[prop][0], "value": value if finite(value) else None,
                              "rank": placed[prop][method], "of": sum(r is not None for r in placed[prop].values()),
                              "verdict": found[i].outcome.value, "text": verdict_text(found[i]),
                              "claim": claim_records([found[i]])[0]}
        result[method] = {"method": method, "title": NAMES[method], "measures": measures,
                          "not_built": {part: {"verdict": Outcome.NOT_MEASURABLE.value, "reason": why} for part, why in NOT_BUILT.items()},
                          "not_applicable": (not_applicable or {}).get(method, {}), "field": sorted(verdicts),
                          "source": source or {}}
    return result


def _measured_on(source: dict) -> str:
    """Where the runs were measured, in a line (or that it is not known)."""
    if not source.get("runs"):
        return "Measured on: not recorded."
    other = f", {source['runs_at_other_commits']} of them at another commit" if source.get("runs_at_other_commits") else ""
    return (f"Measured on {source.get('machine')} at commit {str(source.get('commit'))[:12]}"
            f"{' (dirty tree)' if source.get('dirty') else ''}: {source['runs']} runs{other}.")


def page(record: dict) -> str:
    """The scorecard page of one method's record."""
    rows = []
    for prop, one in record["measures"].items():
        rank = f"{one['rank']} of {one['of']}" if one["rank"] is not None else "-"
        rows.append({"measure": one["measure"], "value": number(math.nan if one["value"] is None else one["value"]),
                     "rank": rank, "verdict": one["verdict"], "criterion": one["claim"]["criterion"]})
    lines = [f"# Scorecard: {record['title']} (`{record['method']}`)", "",
             f"Among {len(record['field'])} methods: {', '.join(f'`{m}`' for m in record['field'])}. "
             "Every measure is lower-is-better; rank 1 is the best.", "", _measured_on(record["source"]), "",
             markdown.table(pd.DataFrame(rows)), "", "## Verdicts", ""]
    for prop, one in record["measures"].items():
        claim = one["claim"]
        measured = "; ".join(f"{name}: " + ", ".join(f"{key}={number(math.nan if v is None else v)}" for key, v in numbers.items())
                             for name, numbers in claim["measured"].items())
        lines += [f"- **{claim['id']}**: {claim['wording']} {one['text']}." + (f" Measured: {measured}." if measured else "")]
    lines += ["", "## Not measured by this battery", ""]
    lines += [f"- **{part}**: {one['verdict']}: {one['reason']}" for part, one in record["not_built"].items()]
    lines += [f"- **{part}**: not applicable, because {why}" for part, why in record["not_applicable"].items()]
    return "\n".join(lines) + "\n"
