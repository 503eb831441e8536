"""`python -m analysis.report DIR... [--out REPORT_DIR]`: from run directories to report.md.

Writes into REPORT_DIR (default: <first DIR>/report):
  report.md     the per-method summary at each worker count (mean ± std over seeds), the runs
                that failed or did not finish, and the figures;
  <figure>.png  one per figure type that has data (analysis.figures.FIGURES);
  summary.csv   the summary's numbers, unformatted (means, stds, run and seed counts);
  runs.csv      one row per run: status, error and the per-run numbers the summary averages.
--publish NAME also writes the summary as docs/measured/NAME.md, rendered from its numbers, with the
commit and machine the runs were measured on (analysis/measured.py): `--publish quickstart` after
`make run` gives the page docs/quickstart.md links.
and prints the summary table. The summary and figures use finished runs (status done) with finite
numbers; --include-unfinished adds runs still running or killed (no end recorded), in rows of
their own. Failed runs and runs with non-finite numbers (skipped steps, a non-finite last
evaluation) are never averaged in; they and the unfinished runs are always listed.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import matplotlib
import pandas as pd

from analysis import markdown, measured
from analysis.figures import FIGURES
from analysis.load import load_runs
from analysis.report_tables import SHOWN, device_notes, problem_runs, stand_in_notes, summary_cells
from analysis.settings import key_title, varying_in
from analysis.divergence import diverged_reasons
from analysis.stats import STATS, nonfinite_reasons, run_stats, summarize
from analysis.tables import RunTables

def summary_records(summary: pd.DataFrame) -> list[dict]:
    """The summary's rows as JSON records (NaN as null): what a measured page keeps."""
    return json.loads(summary.to_json(orient="records", double_precision=15))


def summary_page(records: list[dict]) -> str:
    """A measured page's body from summary_records (analysis/measured.py): the summary table, as
    report.md shows it, and how its columns are reduced."""
    summary = pd.DataFrame.from_records(records)
    return "\n".join([rules(), "", markdown.table(summary_cells(summary))])


def rules() -> str:
    """How each column of the summary is reduced, read from the headline registry: the report
    never restates the rule, it prints the one summary.json and the terminal summary apply."""
    columns = "; ".join(f"{STATS[stat].title}: {STATS[stat].reduce.value}" for stat in SHOWN)
    return ("Per run, from its logged train rows, as summary.json and the terminal summary reduce them "
            f"(experiments/runformat/headline.py): {columns}; the task's metric: its last evaluation (a non-finite one flags "
            "the run), in a column of its own per metric. Across runs that differ only in their seed: mean ± std over seeds.")


def save_figures(tables: RunTables, out: Path) -> list[tuple[str, str, Path | None]]:
    """(name, caption, PNG path or None for no data) for every figure type."""
    saved = []
    for name, (draw, caption) in FIGURES.items():
        figure = draw(tables)
        path = None
        if figure is not None:
            path = out / f"{name}.png"
            figure.savefig(path, dpi=100)
        saved.append((name, caption, path))
    return saved


def _joined(*reasons: pd.Series) -> pd.Series:
    """Per run_id, its reasons joined by "; " ("" for none)."""
    frame = pd.concat(reasons, axis=1).fillna("")
    return frame.apply(lambda row: "; ".join(part for part in row if part), axis=1).astype(object)


def write_report(paths: list[Path], out: Path, include_unfinished: bool = False, cache: bool = True) -> str:
    """Writes report.md, the figures and the CSVs into `out`; returns the summary as text.
    Raises FileNotFoundError when a path is missing or holds no run."""
    tables = load_runs(paths, cache=cache)
    if tables.runs.empty:
        raise FileNotFoundError(f"no run directories below {', '.join(map(str, paths))}")
    out.mkdir(parents=True, exist_ok=True)
    stats = run_stats(tables)
    nonfinite = _joined(diverged_reasons(tables), nonfinite_reasons(tables.runs, stats))
    # Failed, diverged and non-finite runs are never averaged in (a diverged run's accuracy is no
    # result); unfinished ones only on request, in rows of their own (summarize keeps statuses apart).
    statuses = ["done", "running", "missing"] if include_unfinished else ["done"]
    ok = tables.runs["status"].isin(statuses).to_numpy() & (nonfinite.to_numpy() == "")
    used = tables.select(run_id=list(tables.runs.loc[ok, "run_id"]))
    summary = summarize(stats[stats["run_id"].isin(set(used.runs["run_id"]))])
    cells = summary_cells(summary)
    varying = [key_title(column) for column in varying_in(summary)]
    notes = stand_in_notes(summary)
    stand_in = ("Rows whose data is `stand-in` trained on stand-in data of the same shapes, not the paper's data: "
                + "; ".join(notes) + ".") if notes else ""
    problems = problem_runs(tables.runs, nonfinite)
    devices = device_notes(used.runs)
    summary.to_csv(out / "summary.csv", index=False)
    summary_records(summary)  # fails here, not at --publish, on a summary JSON cannot hold
    stats.merge(tables.runs[["run_id", "name", "error", "metrics_cut", "train_rows", "last_step"]], on="run_id").to_csv(
        out / "runs.csv", index=False)
    figures = save_figures(used, out)

    counts = tables.runs["status"].value_counts()
    lines = [
        "# sparsebench report",
        "",
        f"Generated {datetime.datetime.now().isoformat(timespec='seconds')} from: " + ", ".join(f"`{p}`" for p in paths),
        "",
        f"{len(tables.runs)} runs: " + ", ".join(f"{count} {status}" for status, count in counts.items()) + ".",
        "",
        "## Summary per method and worker count",
        "",
        rules(),
        "",
        *([f"Rows also differ in: {', '.join(varying)} (runs are averaged only when nothing but the seed differs).", ""]
          if varying else []),
        markdown.table(cells) if len(cells) else "No finished runs.",
        "",
        *([stand_in, ""] if stand_in else []),
        *[line for note in devices for line in (note, "")],
        "## Failed, unfinished, diverged and non-finite runs",
        "",
        "Not averaged into the summary (unfinished runs are, with --include-unfinished, in rows of their own).",
        "",
        markdown.table(problems) if len(problems) else "None: every run finished with finite numbers.",
        "",
        "## Figures",
        "",
    ]
    for name, caption, path in figures:
        lines += [f"### {caption}", "", f"![{caption}]({path.name})" if path else "no data", ""]
    (out / "report.md").write_text("\n".join(lines))
    text = cells.to_string(index=False) if len(cells) else "No finished runs."
    if varying:
        text += f"\nRows also differ in: {', '.join(varying)}."
    if stand_in:
        text += "\n" + stand_in
    for note in devices:
        text += "\n" + note
    if len(problems):
        text += "\n\nFailed, unfinished, diverged or non-finite runs (see report.md):\n" + problems.to_string(index=False)
    return text


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status (2: no runs found)."""
    parser = argparse.ArgumentParser(prog="python -m analysis.report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="+", type=Path, help="run or sweep directories (searched recursively)")
    parser.add_argument("--out", type=Path, default=None, help="report folder (default: <first DIR>/report)")
    parser.add_argument("--include-unfinished", action="store_true", help="also summarize runs still running or killed, in rows of their own (never failed or non-finite ones)")
    parser.add_argument("--no-cache", action="store_true", help="do not read or write the metrics cache")
    parser.add_argument("--publish", metavar="NAME", default=None,
                        help="also write the summary to docs/measured/NAME.md (quickstart: the page the docs link)")
    args = parser.parse_args(argv)
    matplotlib.use("Agg")  # files only: never open a window, even where a display exists
    out = args.out or args.dirs[0] / "report"
    try:
        text = write_report(args.dirs, out, args.include_unfinished, cache=not args.no_cache)
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(text)
    print(f"\nreport: {out / 'report.md'}")
    if args.publish:
        summary = pd.read_csv(out / "summary.csv")
        page = measured.publish(args.publish, f"{args.publish}: every method's summary, as measured",
                                measured.run_command(args.dirs), "analysis.report:summary_page",
                                summary_records(summary), measured.provenance(args.dirs, None))
        print(f"published: {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
