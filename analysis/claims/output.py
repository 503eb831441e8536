"""Verdicts as text: claims.md (one row per claim: claim, source, measured, criterion, verdict),
claims.json (everything, numbers as numbers) and the terminal's table."""
from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Iterable

import pandas as pd

from analysis import markdown
from analysis.claims.claim import Outcome, Verdict, finite
from analysis.claims.study import Study

MARKDOWN, JSON = "claims.md", "claims.json"
DOCS = "docs/claims.md"


def number(value: float | str) -> str:
    """4 significant digits; inf as "inf" (a target never reached), NaN as "-"; text (why a run
    diverged) as it is."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and math.isnan(value):
        return "-"
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.4g}"


def measured_text(verdict: Verdict) -> str:
    """"<subject>: name=value, ...; ..." with failing subjects marked; the unmeasured named."""
    parts = []
    for name, numbers in verdict.measured.items():
        values = ", ".join(f"{key}={number(value)}" for key, value in numbers.items())
        mark = " (reported, not judged)" if name not in verdict.held else "" if verdict.held[name] else " (fails)"
        parts.append(f"{name}{mark}: {values}")
    return "; ".join(parts) if parts else "-"


def verdict_text(verdict: Verdict) -> str:
    """The verdict, with its reason (NOT_MEASURABLE: why; otherwise what was left unmeasured) and
    which runs were judged when the claim's own experiments narrowed them."""
    notes = "; ".join(filter(None, [verdict.reason, verdict.scope]))
    return f"{verdict.outcome.value}: {notes}" if notes else verdict.outcome.value


def brief_text(verdict: Verdict, failures_shown: int = 3, numbers_shown: int = 2) -> str:
    """One short cell: how many measured subjects hold and the first failing ones with their
    first numbers ("3 of 4 hold; fails: micro | mlp/fashion_mnist | d=0.01 | W=8: settled=0.17"),
    or why nothing was measured."""
    return _brief(verdict.outcome.value, verdict.reason, verdict.held, verdict.measured, failures_shown, numbers_shown)


def _brief(outcome: str, reason: str | None, held: dict[str, bool], measured: dict[str, dict[str, float | None]],
           failures_shown: int = 3, numbers_shown: int = 2) -> str:
    if outcome == Outcome.NOT_MEASURABLE.value:
        return f"not measurable: {reason}"
    def shown(names: list[str]) -> str:
        cells = [f"{name}: " + ", ".join(f"{key}={number(_number_of(value))}" for key, value in
                                         list(measured[name].items())[:numbers_shown]) for name in names[:failures_shown]]
        more = f" (and {len(names) - failures_shown} more)" if len(names) > failures_shown else ""
        return "; ".join(cells) + more

    text = f"{sum(held.values())} of {len(held)} hold"
    failing = [name for name, ok in held.items() if not ok]
    if failing:
        text += "; fails: " + shown(failing)
    reported = [name for name in measured if name not in held]  # measured beside, never judged
    if reported:
        text += "; reported, not judged: " + shown(reported)
    diverged = (reason or "").count("diverged at step")  # the runs judge() left out, each named in the reason
    if diverged:
        text += f"; {diverged} diverged run(s) left out"
    return text


def _number_of(value: float | str | None) -> float | str:
    return math.nan if value is None else value  # claims.json's null: a number that was not finite


def brief_table(verdicts: list[Verdict]) -> str:
    """The summary table: claim, verdict, how many measured subjects hold (rendered from the
    records claims.json holds, as the measured page is)."""
    return brief_table_of(claim_records(verdicts))


def brief_table_of(claims: list[dict]) -> str:
    """The summary table from claims.json's records (a number that was not finite is null there:
    it shows as "-")."""
    frame = pd.DataFrame([{"claim": f"`{c['id']}`", "verdict": c["verdict"],
                           "measured": _brief(c["verdict"], c["reason"], c["held"], c["measured"])} for c in claims],
                         columns=["claim", "verdict", "measured"])
    return markdown.table(frame)


def measured_page(record: dict) -> str:
    """docs/measured/claims.md's body, from claims.json's record (analysis/measured.py)."""
    seen = Counter(claim["verdict"] for claim in record["claims"])
    verdicts = ", ".join(f"{seen.get(outcome.value, 0)} {outcome.value}" for outcome in Outcome)
    return "\n".join([
        f"{verdicts}; {record['runs_judged']} finished runs judged"
        + (f" ({record['runs_left_out']} not finished, left out)" if record["runs_left_out"] else "")
        + (f"; {record['runs_diverged']} diverged, left out" if record.get("runs_diverged") else "") + ".",
        "Each row's subjects are a method, its context and density (and W); `measured` counts those that meet "
        "the criterion and names the first that do not. Each claim's statistic and criterion: "
        "[claims.md](../claims.md); what each measured at this scale: [reproduce.md](../reproduce.md#what-it-measured).",
        "",
        brief_table_of(record["claims"]),
    ])


def counts(verdicts: Iterable[Verdict]) -> str:
    """"12 HOLDS, 1 DOES_NOT_HOLD, 17 NOT_MEASURABLE"."""
    seen = Counter(verdict.outcome for verdict in verdicts)
    return ", ".join(f"{seen.get(outcome, 0)} {outcome.value}" for outcome in Outcome)


def markdown_text(verdicts: list[Verdict], study: Study, paths: list[str]) -> str:
    frame = pd.DataFrame([{
        "claim": f"`{v.claim.id}`: {v.claim.wording}",
        "source": v.claim.source,
        "measured": measured_text(v),
        "criterion": v.claim.criterion,
        "verdict": verdict_text(v),
    } for v in verdicts], columns=["claim", "source", "measured", "criterion", "verdict"])
    lines = [
        "# Claims",
        "",
        f"Study: {', '.join(f'`{p}`' for p in paths)}: {len(study.runs)} finished runs judged"
        + (f" ({study.left_out} not finished, left out)" if study.left_out else "")
        + (f"; {len(study.diverged)} diverged, never averaged in (failing the convergence claims of their method, "
           "named as left out by the other claims that read them)"
           if len(study.diverged) else "") + ".",
        "",
        f"Verdicts: {counts(verdicts)}. Each claim, its statistic and why its criterion: {DOCS}.",
        "",
        "## Summary",
        "",
        brief_table(verdicts),
        "",
        "## Every claim",
        "",
        markdown.table(frame),
        "",
    ]
    return "\n".join(lines)


def _json_number(value: float | str) -> float | str | None:
    if isinstance(value, str):
        return value  # why a run diverged (analysis/claims/diverged.py)
    return float(value) if finite(value) else None  # null, never NaN or Infinity


def json_record(verdicts: list[Verdict], study: Study, paths: list[str]) -> dict:
    return {
        "paths": paths,
        "runs_judged": len(study.runs),
        "runs_left_out": study.left_out,
        "runs_diverged": len(study.diverged),
        "claims": claim_records(verdicts),
    }


def claim_records(verdicts: list[Verdict]) -> list[dict]:
    """claims.json's record of each verdict (numbers as numbers, null where not finite)."""
    return [{
            "id": v.claim.id,
            "wording": v.claim.wording,
            "source": v.claim.source,
            "needs": v.claim.needs,
            "statistic": v.claim.statistic,
            "criterion": v.claim.criterion,
            "verdict": v.outcome.value,
            "reason": v.reason,
            "scope": v.scope,
            "measured": {name: {key: _json_number(value) for key, value in numbers.items()} for name, numbers in v.measured.items()},
            "held": v.held,
        } for v in verdicts]


def write(out: Path, verdicts: list[Verdict], study: Study, paths: list[str]) -> tuple[Path, Path]:
    """Writes claims.md and claims.json into `out` (created); returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    md, js = out / MARKDOWN, out / JSON
    md.write_text(markdown_text(verdicts, study, paths))
    js.write_text(json.dumps(json_record(verdicts, study, paths), indent=2, allow_nan=False) + "\n")
    return md, js


def terminal_text(verdicts: list[Verdict]) -> str:
    """One line per claim: verdict, id, measured numbers (and the reason when not measurable)."""
    width = max((len(v.claim.id) for v in verdicts), default=0)
    lines = []
    for v in verdicts:
        detail = v.reason if v.outcome is Outcome.NOT_MEASURABLE else measured_text(v)
        lines.append(f"{v.outcome.value:<15} {v.claim.id:<{width}}  {detail}")
    lines.append(counts(verdicts))
    return "\n".join(lines)
