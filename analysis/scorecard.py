"""A method's scorecard: every measure of the standard battery with the method's rank among all
the methods a study holds, and each generic verdict (analysis/claims/generic.py).

One number per measure and method, the one its verdict hinges on: the worst over the verdict's
judged subjects (kernel paths, worker counts, contexts) of the subject's headline number. Every
measure but one is lower-is-better (a steeper fall of selection time, less |U| over k, a smaller
density error, fewer indices, less imbalance, a smaller gap to dense); the break-even's lower
end is better higher (a step faster than dense's for sure). Rank 1 is the best; methods tied
share a rank, and a method the verdict could not measure has no number and no rank.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import pandas as pd

from analysis import markdown
from analysis.claims.claim import Verdict, finite
from analysis.claims.generic import PROPERTIES, claims_for
from analysis.claims.judge import judge_study
from analysis.claims.pays import PerStep
from analysis.claims.output import claim_records, number, verdict_text
from analysis.claims.papers import NAMES
from analysis.claims.study import Study

class Measure(NamedTuple):
    """A property's measure: its name, the subject number it reads, how that number is turned
    (abs for an error), and its direction (the pays measure's break-even is better higher)."""

    name: str
    key: str
    part: str  # the part of the battery whose runs it reads (experiments/studies/compare/battery.py)
    turn: Callable[[float], float] = float
    higher_is_better: bool = False
    interval: tuple[str, str] | None = None  # the subject's numbers that bound the value over seeds (95%)


MEASURES: dict[str, Measure] = {
    "selection": Measure("selection time slope against W", "slope", "selection"),
    "buildup": Measure("largest |U| / k over W (settled)", "worst |U|/k", "statistics"),
    "density": Measure("largest |settled density error|", "settled", "statistics", abs),
    "traffic": Measure("largest indices per rank / k (settled)", "worst k_max/k", "statistics"),
    "balance": Measure("largest settled load imbalance", "imbalance", "statistics"),
    "accuracy": Measure("largest gap to dense's final accuracy", "gap", "convergence", interval=("gap low", "gap high")),
    "pays": Measure("highest lower end of the break-even (default clusters)", "best low", "per-step", higher_is_better=True),
}
assert tuple(MEASURES) == PROPERTIES, "one measure per generic property"


def measure(verdict: Verdict, prop: str) -> float:
    """The worst of the judged subjects' headline number; NaN when none was measured."""
    found = MEASURES[prop]
    values = [found.turn(numbers[found.key]) for name, numbers in verdict.measured.items()
              if name in verdict.held and found.key in numbers]
    values = [value for value in values if finite(value)]
    if not values:
        return math.nan
    return min(values) if found.higher_is_better else max(values)


def interval(verdict: Verdict, prop: str, value: float) -> dict | None:
    """The 95% interval over seeds of the subject whose number is the measure's `value` (its
    `gap low` and `gap high`, NaN as None: one seed has none), with the seeds it rests on."""
    found = MEASURES[prop]
    if found.interval is None or not finite(value):
        return None
    low, high = found.interval
    for name, numbers in verdict.measured.items():
        if name in verdict.held and found.turn(numbers.get(found.key, math.nan)) == value:
            return {"low": numbers[low] if finite(numbers[low]) else None,
                    "high": numbers[high] if finite(numbers[high]) else None, "seeds": numbers.get("seeds")}
    return None


def field(study: Study, methods: list[str], per_step: PerStep | None = None) -> dict[str, list[Verdict]]:
    """Every method's generic verdicts on one study (and the end-to-end model's cells), in PROPERTIES' order."""
    return {method: judge_study(study, claims_for(method, per_step)) for method in methods}


def ranks(values: dict[str, float], higher_is_better: bool = False) -> dict[str, int | None]:
    """Competition ranks, the best value first (1, 2, 2, 4); None for a missing value."""
    ranked = sorted((value for value in values.values() if finite(value)), reverse=higher_is_better)
    return {method: (ranked.index(value) + 1 if finite(value) else None) for method, value in values.items()}


def records(verdicts: dict[str, list[Verdict]], not_applicable: dict[str, dict[str, str]] | None = None,
            source: dict | None = None, runs: dict[str, dict[str, list[str]]] | None = None) -> dict[str, dict]:
    """Each method's JSON record: per measure its value, rank among the methods present, the
    verdict with its reason and numbers; the parts refused; `source`: where the runs were
    measured (analysis.measured.provenance: commit, machine, runs); `runs`: per method and part
    of the battery, its run folders (what each measure was computed from)."""
    values = {prop: {method: measure(found[i], prop) for method, found in verdicts.items()} for i, prop in enumerate(PROPERTIES)}
    placed = {prop: ranks(values[prop], MEASURES[prop].higher_is_better) for prop in PROPERTIES}
    result = {}
    for method, found in verdicts.items():
        measures = {}
        for i, prop in enumerate(PROPERTIES):
            value = values[prop][method]
            measures[prop] = {"measure": MEASURES[prop].name, "part": MEASURES[prop].part,
                              "higher_is_better": MEASURES[prop].higher_is_better, "value": value if finite(value) else None,
                              "rank": placed[prop][method], "of": sum(r is not None for r in placed[prop].values()),
                              "verdict": found[i].outcome.value, "text": verdict_text(found[i]),
                              "interval": interval(found[i], prop, value), "claim": claim_records([found[i]])[0]}
        result[method] = {"method": method, "title": NAMES[method], "measures": measures,
                          "not_applicable": (not_applicable or {}).get(method, {}), "field": sorted(verdicts),
                          "source": source or {}, "runs": (runs or {}).get(method, {})}
    return result


def _measured_on(source: dict) -> str:
    """Where the runs were measured, in a line (or that it is not known)."""
    if not source.get("runs"):
        return "Measured on: not recorded."
    other = f", {source['runs_at_other_commits']} of them at another commit" if source.get("runs_at_other_commits") else ""
    return (f"Measured on {source.get('machine')} at commit {str(source.get('commit'))[:12]}"
            f"{' (dirty tree)' if source.get('dirty') else ''}: {source['runs']} runs{other}.")


def value_text(one: dict) -> str:
    """A measure's value, with its 95% interval over seeds where it has one."""
    text = number(math.nan if one["value"] is None else one["value"])
    bounds = one.get("interval")
    if bounds and bounds["low"] is not None:
        text += f" (95%: {number(bounds['low'])} to {number(bounds['high'])}, {bounds['seeds']:g} seeds)"
    return text


def page(record: dict) -> str:
    """The scorecard page of one method's record."""
    rows = []
    for prop, one in record["measures"].items():
        rank = f"{one['rank']} of {one['of']}" if one["rank"] is not None else "-"
        rows.append({"measure": one["measure"], "value": value_text(one),
                     "rank": rank, "verdict": one["verdict"], "criterion": one["claim"]["criterion"]})
    lines = [f"# Scorecard: {record['title']} (`{record['method']}`)", "",
             f"Among {len(record['field'])} methods: {', '.join(f'`{m}`' for m in record['field'])}. "
             "Rank 1 is the best: the lowest value, except the break-even's, the highest.", "", _measured_on(record["source"]), "",
             markdown.table(pd.DataFrame(rows)), "", "## Verdicts", ""]
    for prop, one in record["measures"].items():
        claim = one["claim"]
        measured = "; ".join(f"{name}: " + ", ".join(f"{key}={number(math.nan if v is None else v)}" for key, v in numbers.items())
                             for name, numbers in claim["measured"].items())
        lines += [f"- **{claim['id']}**: {claim['wording']} {one['text']}." + (f" Measured: {measured}." if measured else "")]
    if record["not_applicable"]:
        lines += ["", "## Not applicable", ""]
        lines += [f"- **{part}**: not applicable, because {why}" for part, why in record["not_applicable"].items()]
    if record.get("figures"):
        lines += ["", "## Among the others", "", f"Each measure, every method measured on it, `{record['method']}` highlighted.", ""]
        lines += [f"![{record['measures'][prop]['measure']}]({name})" for prop, name in record["figures"].items()]
    return "\n".join(lines) + "\n"
