"""The leaderboard: every registered method on every measure of the standard battery, from the
scorecard records of one study folder (analysis/scorecard.py; `make compare`, docs/compare.md).

    data(records, registered, folder) -> the page's JSON data (docs/measured/leaderboard.json)
    page(data)                        -> docs/measured/leaderboard.md
    html(data)                        -> docs/measured/leaderboard.html: the same table, sortable

Each cell is a method's measure, its rank among the methods measured and its verdict, exactly as
its scorecard record has them; the runs it was computed from are listed per method and part of
the battery (paths relative to the study folder), so every cell can be traced to its runs. A
registered method the folder holds no runs of is listed as not run, never left out.
"""
from __future__ import annotations

import html as markup
import math

import pandas as pd

from analysis import markdown
from analysis.claims.output import number

# The verdicts in a cell, short.
SHORT = {"HOLDS": "holds", "DOES_NOT_HOLD": "fails", "NOT_MEASURABLE": "n/m"}


def data(records: dict[str, dict], registered: list[str], folder: str) -> dict:
    """The page's data: the measures (name, direction, part of the battery), one row per method
    with a record (every cell as its record has it, its runs), and the registered methods without one."""
    first = next(iter(records.values()))
    measures = {prop: {"name": one["measure"], "higher_is_better": one["higher_is_better"], "part": one["part"]}
                for prop, one in first["measures"].items()}
    rows = [{"method": method, "title": record["title"], "runs": record["runs"],
             "cells": {prop: {key: one[key] for key in ("value", "rank", "of", "verdict")}
                       for prop, one in record["measures"].items()}}
            for method, record in sorted(records.items())]
    return {"folder": folder, "measures": measures, "rows": rows,
            "not_run": [name for name in registered if name not in records]}


def cell_text(cell: dict) -> str:
    """"value (rank, verdict)", or the verdict alone for a method not measured there."""
    if cell["value"] is None:
        return SHORT[cell["verdict"]]
    return f"{number(cell['value'])} (#{cell['rank']}, {SHORT[cell['verdict']]})"


def best(data: dict) -> dict[str, list[str]]:
    """Per measure, the methods ranked first."""
    return {prop: [row["method"] for row in data["rows"] if row["cells"][prop]["rank"] == 1] for prop in data["measures"]}


def page(data: dict) -> str:
    """The markdown page (module docstring)."""
    columns = {prop: one["name"] + (" (higher is better)" if one["higher_is_better"] else "")
               for prop, one in data["measures"].items()}
    frame = pd.DataFrame([{"method": f"`{row['method']}`", **{columns[p]: cell_text(row["cells"][p]) for p in columns}}
                          for row in data["rows"]])
    leaders = best(data)
    lines = [f"Every method of `{data['folder']}` on every measure of the standard battery "
             "([compare.md](../compare.md)): the value, its rank among the methods measured (#1 the best) and the "
             "verdict of its generic property ([claims.md](../claims.md#every-method-against-the-field-genericpropertym)). "
             "n/m: not measurable there, or not applicable (the method's scorecard says which and why). "
             "The same table, sortable: [leaderboard.html](leaderboard.html).", "",
             markdown.table(frame), "", "**Best per measure:** "
             + "; ".join(f"{data['measures'][p]['name']}: {', '.join(f'`{m}`' for m in ms) or 'none measured'}"
                         for p, ms in leaders.items()) + ".", ""]
    if data["not_run"]:
        lines += [f"Registered, not run in this study: {', '.join(f'`{m}`' for m in data['not_run'])}.", ""]
    lines += ["## The runs behind each cell", "",
              "Per method and part of the battery, its run folders below the study folder. "
              + "; ".join(f"{one['name']}: {one['part']}" for one in data["measures"].values()) + ".", ""]
    for row in data["rows"]:
        parts = "; ".join(f"{part}: {', '.join(f'`{run}`' for run in runs)}" for part, runs in row["runs"].items() if runs)
        lines.append(f"- `{row['method']}`: {parts or 'no runs'}")
    return "\n".join(lines) + "\n"


def _sort_key(cell: dict, higher_is_better: bool) -> str:
    """The number a column sorts by, best first when sorted ascending; unmeasured last."""
    value = cell["value"]
    if value is None or not math.isfinite(value):
        return "Infinity"  # a number to the sorter (parseFloat): after every measured one
    return repr(-value if higher_is_better else value)


SORTER = """<script>
document.querySelectorAll('th').forEach((th, column) => th.addEventListener('click', () => {
  const body = th.closest('table').tBodies[0];
  const key = row => row.cells[column].dataset.sort ?? row.cells[column].textContent;
  const number = text => (text === '' || isNaN(text) ? null : parseFloat(text));
  const up = th.dataset.up !== 'true'; th.dataset.up = up;
  [...body.rows].sort((a, b) => {
    const x = number(key(a)), y = number(key(b));
    const order = x !== null && y !== null ? x - y : key(a).localeCompare(key(b));
    return up ? order : -order;
  }).forEach(row => body.appendChild(row));
}));
</script>"""


def html(data: dict) -> str:
    """The table as a plain HTML page; a click on a column's header sorts by it (best first)."""
    head = "".join(f"<th>{markup.escape(one['name'])}</th>" for one in data["measures"].values())
    body = []
    for row in data["rows"]:
        cells = "".join(f"<td data-sort=\"{_sort_key(row['cells'][p], one['higher_is_better'])}\">"
                        f"{markup.escape(cell_text(row['cells'][p]))}</td>" for p, one in data["measures"].items())
        body.append(f"<tr><td>{markup.escape(row['method'])}</td>{cells}</tr>")
    return "\n".join(["<!DOCTYPE html>", "<html><head><meta charset=\"utf-8\"><title>sparsebench leaderboard</title></head><body>",
                      f"<p>Generated from leaderboard.json by analysis/leaderboard.py: every method of {markup.escape(data['folder'])}. "
                      "Click a header to sort (#1 the best).</p>",
                      f"<table border=\"1\"><thead><tr><th>method</th>{head}</tr></thead><tbody>", *body, "</tbody></table>",
                      SORTER, "</body></html>"]) + "\n"
