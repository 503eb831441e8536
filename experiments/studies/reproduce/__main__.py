"""`make reproduce` (= `python -m experiments.studies.reproduce`): the laptop studies, then a verdict on
every claim of the papers.

    python -m experiments.studies.reproduce [--out DIR] [--long] [--quick] [--skip-runs] [--publish] [--selection-device auto]

1. runs the laptop sweeps of experiments/studies/reproduce/studies.py, each a `python run.py -m ...` a
   user could type, one progress line per finished run (every run's own output goes to
   `<out>/<folder>/run.log`);
2. runs the selection-cost study at ResNet-18 size (experiments/studies/reproduce/selection.py);
3. judges every claim on all of it (`python -m analysis.claims <out>` does the same), writes
   `<out>/claims.md` (one row per claim, then the figures it links) and `claims.json`, and prints
   the table.

The default output is `outputs/reproduce/<time>/`. `--quick` is the test suite's cut-down run (a
few steps of two sweeps on the bundled digits, a small selection study): every stage, no claim
settled. `--skip-runs` judges and draws what `--out` already holds. `--publish` also writes the
verdicts as docs/measured/claims.md, with the commit and machine the runs were measured on
(analysis/measured.py): the page the README links. A sweep that fails stops
here with its log's last lines and exit code 1; the claims are judged on what finished.

`--long` (`make reproduce LONG=1`) is the long study (studies.py: LONG_SWEEPS, 42 min on an idle 2-core
machine): 3,000 statistics steps at every W and 30 epochs of convergence, into outputs/reproduce/long/
unless --out says otherwise, published as docs/measured/claims_long.md, then
docs/measured/claims_compare.md (the 30-minute verdicts beside the long ones, analysis/compare_claims.py).

Resume: an `--out` that already holds some of the study's runs (a study stopped, then started
again with the same --out; the long study's fixed folder) reuses every finished run and runs only
the rest (sweeps.py); a selection study that did not finish is run again whole.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from analysis import compare_claims, measured
from analysis.claims import judge_paths
from analysis.claims.output import terminal_text, write
from analysis.report import write_report
from experiments.engine.launcher.environment import REPO_ROOT
from experiments.runformat.run_dir import STATUS
from experiments.studies.reproduce import selection
from experiments.studies.reproduce.studies import LONG_SWEEPS, QUICK_LONG_SWEEPS, QUICK_SWEEPS, SWEEPS
from experiments.studies.reproduce.sweeps import is_done, minutes, run_sweep, say_if_busy, start_study

SELECTION_FOLDER = "selection"
TIMING = "timing.json"  # the whole study's wall time, runs and judging, for --publish after --skip-runs
# What a load beside the studies moves (the other claims do not depend on it).
TIMED = "the selection-cost and convergence.sooner claims time it"
LONG_OUT = REPO_ROOT / "outputs" / "reproduce" / "long"  # one fixed folder: started again, the long study resumes


def figure_links(out: Path) -> str:
    """claims.md's figures: every figure each study's report drew, linked relative to out/."""
    lines = ["", "## Figures", ""]
    for report in sorted(out.glob("*/report")):
        figures = sorted(report.glob("*.png"))
        if figures:
            lines.append(f"From `{report.parent.name}` ([report]({report.relative_to(out) / 'report.md'})):")
            lines.append("")
            lines.extend(f"![{figure.stem}]({figure.relative_to(out)})" for figure in figures)
            lines.append("")
    return "\n".join(lines)


def judge(out: Path) -> Path:
    """Reports per study folder, then claims.md, claims.json and the terminal table; returns
    claims.json's path."""
    for folder in sorted(p for p in out.iterdir() if p.is_dir() and p.name != "claims"):
        if any(folder.rglob(STATUS)):
            write_report([folder], folder / "report", cache=False)
    verdicts, study = judge_paths([out], cache=False)
    markdown, record = write(out, verdicts, study, [str(out)])
    with open(markdown, "a") as text:
        text.write(figure_links(out))
    print(terminal_text(verdicts))
    print(f"claims: {markdown}")
    return record


def publish_claims(record: Path, out: Path, wall_seconds: float | None, pages: Path = measured.PAGES,
                   long: bool = False) -> Path:
    """docs/measured/claims.md (claims_long.md: --long) from the study's claims.json, with where its
    runs were measured."""
    name, command = ("claims_long", "make reproduce LONG=1") if long else ("claims", "make reproduce")
    return measured.publish(
        name, f"The papers' claims, as {command} measured them", command,
        "analysis.claims.output:measured_page", json.loads(record.read_text()),
        measured.provenance([out], wall_seconds), pages=pages)


def publish_comparison(pages: Path = measured.PAGES) -> Path | None:
    """docs/measured/claims_compare.md from the published claims.json and claims_long.json (None
    while either is missing)."""
    short, long = pages / "claims.json", pages / "claims_long.json"
    if not (short.is_file() and long.is_file()):
        return None
    return compare_claims.publish(json.loads(short.read_text()), json.loads(long.read_text()), pages=pages)


def selection_done(folder: Path, study: dict) -> bool:
    """The selection study in `folder` finished: every (method, W, kernels) run directory done."""
    expected = len(selection.KERNEL_PATHS) * len(study.get("methods", selection.METHODS)) * len(study["workers"])
    runs = [status.parent for status in folder.glob(f"*/{STATUS}")] if folder.is_dir() else []
    return len(runs) == expected and all(is_done(run) for run in runs)


def record_time(out: Path, before: float, seconds: float) -> None:
    (out / TIMING).write_text(json.dumps({"wall_seconds": round(before + seconds)}) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make reproduce", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="output directory (default outputs/reproduce/<time>)")
    parser.add_argument("--long", action="store_true",
                        help="the long study (about 45 min on 2 idle cores; default --out outputs/reproduce/long, resumed when started again)")
    parser.add_argument("--quick", action="store_true", help="the test suite's cut-down run")
    parser.add_argument("--skip-runs", action="store_true", help="judge what --out already holds")
    parser.add_argument("--publish", action="store_true", help="write the verdicts to docs/measured/claims.md (--long: claims_long.md and claims_compare.md)")
    parser.add_argument("--selection-device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="where the selection replay runs: auto, the GPU when there is one (default); cpu forces the CPU")
    options = parser.parse_args(argv)
    out = start_study(options.out or (LONG_OUT if options.long else None), "reproduce")
    started = time.monotonic()
    # A resumed study's wall time is the sum of its sessions (each reused run was timed once): what
    # the sessions before this one recorded, kept up to date after every sweep in case this one stops too.
    before = json.loads((out / TIMING).read_text()).get("wall_seconds", 0) if (out / TIMING).is_file() else 0
    if not options.skip_runs:
        say_if_busy(TIMED)
        sweeps = {(False, False): SWEEPS, (True, False): QUICK_SWEEPS,
                  (False, True): LONG_SWEEPS, (True, True): QUICK_LONG_SWEEPS}[options.quick, options.long]
        total = len(sweeps) + 1
        for number, sweep in enumerate(sweeps, 1):
            run_sweep(sweep, out, number, total)
            record_time(out, before, time.monotonic() - started)
        print(f"[{total}/{total}] selection cost at ResNet-18 size (kernels torch and auto, on "
              f"{selection.study_device(options.selection_device)})", flush=True)
        study = selection.QUICK if options.quick else selection.FULL
        if selection_done(out / SELECTION_FOLDER, study):
            print(f"[{total}/{total}] selection study already done: reused", flush=True)
        else:
            if (out / SELECTION_FOLDER).exists():  # stopped part-way: it runs whole, into an empty folder
                print(f"[{total}/{total}] selection study unfinished: removed and run again", flush=True)
                shutil.rmtree(out / SELECTION_FOLDER)
            selection.run_selection_study(out / SELECTION_FOLDER, **study, device=options.selection_device)
    elif not out.is_dir():
        raise SystemExit(f"--skip-runs: {out} does not exist")
    record = judge(out)
    wall = time.monotonic() - started
    print(f"make reproduce: {minutes(wall)}, results in {out}")
    if not options.skip_runs:
        record_time(out, before, wall)
    if options.publish:
        # A study judged again (--skip-runs) keeps the time its runs took, when it recorded one.
        timing = json.loads((out / TIMING).read_text()) if (out / TIMING).is_file() else {}
        print(f"published: {publish_claims(record, out, timing.get('wall_seconds'), long=options.long)}")
        comparison = publish_comparison()
        if comparison is not None:
            print(f"published: {comparison}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
