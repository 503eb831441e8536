"""The 30-minute study's verdicts beside the long study's: every claim, its verdict in each, and,
where they differ, the measured numbers of both (docs/measured/claims_compare.md, issue 39).

    python -m analysis.compare_claims SHORT LONG [--publish]

SHORT and LONG are claims records: a study's `claims.json` (`make reproduce` writes one into its
output folder) or a published page's JSON (docs/measured/claims.json, claims_long.json). Without
--publish it prints the page's body; with it, it writes docs/measured/claims_compare.md/.json
through analysis/measured.py, so that `python -m analysis.measured --check` renders it again from
its JSON. `make reproduce LONG=1 ARGS=--publish` writes it after claims_long.md, when
docs/measured/claims.json is there. Nothing here is typed by hand: the rows come from the two
records, the page from the rows.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from analysis import measured
from analysis.claims.output import number

NAME = "claims_compare"
TITLE = "The papers' claims: the 30-minute study beside the long one"
COMMAND = "python -m analysis.compare_claims docs/measured/claims.json docs/measured/claims_long.json --publish"
RENDER = "analysis.compare_claims:page"
SHORT_LABEL, LONG_LABEL = "30 min (`make reproduce`)", "long (`make reproduce LONG=1`)"
# The long study runs the 30-minute study's grids for longer, so its subjects name their run length
# (`mlp/fashion_mnist epochs=200 max_steps=3000`) where the 30-minute study's, at the experiment's
# own length, name none. Without the length, one subject's two measurements share a row.
RUN_LENGTH = re.compile(r" (?:epochs|max_steps)=\d+")


def claims_of(record: dict[str, Any]) -> dict[str, Any]:
    """A study's claims.json, or a published page's JSON (whose `data` is that claims.json)."""
    return record["data"] if "data" in record and "claims" in record["data"] else record


def _subjects(claim: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Each measured subject: its numbers and whether it met the criterion (None: reported only)."""
    if claim is None:
        return {}
    return {name: {"numbers": numbers, "held": claim.get("held", {}).get(name)}
            for name, numbers in (claim.get("measured") or {}).items()}


def _by_subject(subjects: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The subjects keyed by their names without the run length; where that would merge two of one
    study's subjects (Ok-Topk's 600- and 3,000-step runs in the long study), by their full names."""
    bare = {name: RUN_LENGTH.sub("", name) for name in subjects}
    seen = Counter(bare.values())
    return {(bare[name] if seen[bare[name]] == 1 else name): numbers for name, numbers in subjects.items()}


def paired(short: dict[str, dict[str, Any]], long: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per subject: its numbers in each study (None where that study did not measure it)."""
    one, other = _by_subject(short), _by_subject(long)
    return [{"subject": name, "short": one.get(name), "long": other.get(name)}
            for name in [*one, *(n for n in other if n not in one)]]


def compare(short: dict[str, Any], long: dict[str, Any]) -> dict[str, Any]:
    """The page's data: one row per claim (in the short record's order, then any only the long one
    has), each with both verdicts; a row whose verdicts differ carries both studies' subjects."""
    short_claims = {claim["id"]: claim for claim in claims_of(short)["claims"]}
    long_claims = {claim["id"]: claim for claim in claims_of(long)["claims"]}
    rows = []
    for claim_id in [*short_claims, *(i for i in long_claims if i not in short_claims)]:
        one, other = short_claims.get(claim_id), long_claims.get(claim_id)
        row = {"id": claim_id, "wording": (one or other)["wording"],
               "short": one["verdict"] if one else None, "long": other["verdict"] if other else None}
        if row["short"] != row["long"]:
            row["short_reason"] = (one or {}).get("reason") or ""
            row["long_reason"] = (other or {}).get("reason") or ""
            row["subjects"] = paired(_subjects(one), _subjects(other))
        rows.append(row)
    runs = {label: {"judged": claims_of(record).get("runs_judged"), "provenance": record.get("provenance")}
            for label, record in (("short", short), ("long", long))}
    return {"rows": rows, "runs": runs}


def _numbers(subject: dict[str, Any] | None) -> str:
    if subject is None:
        return "(not measured)"
    values = ", ".join(f"{key}={'-' if value is None else number(value)}" for key, value in subject["numbers"].items())
    mark = {True: "", False: " **fails**", None: " (reported)"}[subject["held"]]
    return (values or "-") + mark


def _cell(text: str) -> str:
    """Text in a table cell: a subject's name separates its parts with |."""
    return text.replace("|", "\\|")


def _verdict(verdict: str | None) -> str:
    return "(absent)" if verdict is None else verdict


def page(data: dict[str, Any]) -> str:
    """The page's body: the side-by-side table, then each claim whose verdict differs with the
    numbers both studies measured for it, subject by subject."""
    rows = data["rows"]
    differing = [row for row in rows if row["short"] != row["long"]]
    studies = []
    for label, key in ((SHORT_LABEL, "short"), (LONG_LABEL, "long")):
        source = (data["runs"][key] or {}).get("provenance") or {}
        wall = source.get("wall_seconds")
        took = f", {wall // 60} min {wall % 60:02d} s" if wall is not None else ""
        commit = (source.get("commit") or "an unknown commit")[:12]
        machine = f", on a {source['machine']}" if source.get("machine") else ""
        studies.append(f"- {label}: {data['runs'][key].get('judged')} runs judged, at `{commit}`{took}{machine}")
    lines = [
        f"{len(rows)} claims; {len(differing)} with a different verdict in the two studies. The 30-minute study "
        "runs 600 statistics steps and 5 epochs of convergence, the long one 3,000 steps (Ok-Topk's wide and paper-variant runs 600) and 30 epochs "
        "([reproduce.md](../reproduce.md#the-long-study-make-reproduce-long1)). A subject's name below leaves out "
        "its run length (`epochs`, `max_steps`), which is what the two studies set differently.",
        "",
        *studies,
        "",
        f"| claim | {SHORT_LABEL} | {LONG_LABEL} | |",
        "|---|---|---|---|",
    ]
    for row in rows:
        same = "" if row["short"] == row["long"] else "**differs**"
        lines.append(f"| `{row['id']}` | {_verdict(row['short'])} | {_verdict(row['long'])} | {same} |")
    if differing:
        lines += ["", "## Where the verdicts differ", ""]
    for row in differing:
        lines += [f"### `{row['id']}`: {_verdict(row['short'])} in 30 min, {_verdict(row['long'])} long", "",
                  row["wording"], ""]
        for label, key in (("30 min", "short_reason"), ("long", "long_reason")):
            if row[key]:
                lines += [f"{label}: {row[key]}", ""]
        if row["subjects"]:
            lines += ["| subject | 30 min | long |", "|---|---|---|"]
            lines += [f"| {_cell(one['subject'])} | {_numbers(one['short'])} | {_numbers(one['long'])} |"
                      for one in row["subjects"]]
            lines.append("")
    return "\n".join(lines)


def publish(short: dict[str, Any], long: dict[str, Any], pages: Path = measured.PAGES) -> Path:
    """docs/measured/claims_compare.md/.json; the header's provenance is the long study's."""
    fresh = measured.provenance([], None)  # today's date and this checkout: when it was compared
    source = {**fresh, **{key: value for key, value in (long.get("provenance") or {}).items()
                          if key not in ("published", "published_at")}}
    return measured.publish(NAME, TITLE, COMMAND, RENDER, compare(short, long), source, pages=pages)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.compare_claims", description=__doc__.split("\n\n")[0])
    parser.add_argument("short", type=Path, help="the 30-minute study's claims.json (or docs/measured/claims.json)")
    parser.add_argument("long", type=Path, help="the long study's claims.json (or docs/measured/claims_long.json)")
    parser.add_argument("--publish", action="store_true", help="write docs/measured/claims_compare.md/.json")
    options = parser.parse_args(argv)
    short, long = (json.loads(path.read_text()) for path in (options.short, options.long))
    if options.publish:
        print(f"published: {publish(short, long)}")
    else:
        print(page(compare(short, long)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
