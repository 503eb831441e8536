"""`make compare METHOD=<name>[,<name>...]` (= `python -m experiments.studies.compare --method ...`):
the standard battery for each named method, then every method's generic verdicts and scorecard.

    python -m experiments.studies.compare (--method NAME[,NAME...] | --baseline) [--out DIR] [--quick] [--skip-runs]
        [--publish] [--jobs 2] [KEY=VALUE ...]

1. refuses an unknown method name, or a bad override, before any run starts (exit 2);
2. runs the battery (experiments/studies/compare/battery.py) for each named method and for the
   field (below; the test suite's: the references the verdicts compare with, dense for accuracy
   and MiCRO for balance): the untimed sweeps `--jobs` at a time (default: one per core, at most
   2), then each selection replay alone (schedule.py); every part a folder of `--out` already
   holds done is reused, so a second call runs only a new method's runs;
3. judges the generic verdicts (analysis/claims/generic.py) of every method the folder holds and
   writes, per method, `<out>/records/<name>.json` and the scorecard `<out>/scorecards/<name>.md`
   (every measure with its rank among all those methods, each verdict; analysis/scorecard.py);
4. with --publish, the leaderboard of every method the folder holds, docs/measured/leaderboard.md
   and its sortable leaderboard.html (analysis/leaderboard.py), with the commit and machine.

Beside the named methods runs the field each scorecard ranks them among: every registered method
(the baseline study, baseline.py; `--baseline` runs it alone), in the default `--out`,
outputs/compare/<commit>_<cpu>_<gpu>/: at the same commit on the same machine every call reads
the runs already there and runs only what is missing. `KEY=VALUE` overrides go to every run
(recorded in its config: runs with other overrides are other runs); a method whose files live
outside sparsifiers/ is named through SPARSEBENCH_METHODS and found with
`hydra.searchpath=[file://DIR]` (docs/compare.md). `--quick` is the test suite's battery (the
bundled digits, W = 2 and 4, 420 statistics steps, one convergence seed of a few steps, the
quick selection replay, the quickstart study's per-step runs; the references as the field).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from analysis import measured, scorecard
from analysis.claims.study import Study
from analysis.figures.scorecard import measure_figure
from analysis.load import load_runs
from experiments.engine.launcher.environment import REPO_ROOT
from experiments.runformat.errors import ConfigError
from experiments.studies.compare.battery import (LAPTOP, QUICK, VERDICT_FOLDERS, Scale, per_step_baselines, plan_method,
                                                 refusal, statistics_sweep)
from experiments.studies.compare.baseline import battery_of, estimate_s, keyed_folder
from experiments.studies.compare.schedule import Ledger, run_battery
from experiments.studies.compare.pays import per_step
from experiments.studies.endtoend.__main__ import MAX_JOBS
from experiments.studies.compare.publish import publish, run_folders
from experiments.studies.reproduce.sweeps import minutes, say_if_busy, start_study, threads_override
from sparsifiers import registry

COMPARE_OUT = REPO_ROOT / "outputs" / "compare"
REFUSED = "not_applicable.json"  # what each method refused, kept across calls


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="make compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", default=None, help="registered method names, comma-separated (sparsifiers/registry.py)")
    parser.add_argument("--baseline", action="store_true", help="the baseline study alone: every registered method")
    parser.add_argument("--out", type=Path, default=None,
                        help="the study's folder (default outputs/compare/<commit>_<cpu>_<gpu>/, reused by every call there)")
    parser.add_argument("--quick", action="store_true", help="the test suite's cut-down battery")
    parser.add_argument("--jobs", type=int, default=min(MAX_JOBS, os.cpu_count() or 1),
                        help=f"untimed sweeps run at once (default: one per core, at most {MAX_JOBS}); "
                        "each selection replay runs alone")
    parser.add_argument("--skip-runs", action="store_true", help="judge and write what --out already holds")
    parser.add_argument("--publish", action="store_true", help="write the leaderboard of every method --out holds "
                        "to docs/measured/leaderboard.md (and .html)")
    parser.add_argument("--pages", type=Path, default=measured.PAGES, help=argparse.SUPPRESS)  # the tests' own folder
    parser.add_argument("overrides", nargs="*", help="config overrides for every run (KEY=VALUE)")
    return parser.parse_args(argv)


def checked_methods(options: argparse.Namespace, overrides: tuple[str, ...], scale: Scale) -> list[str]:
    """The named methods (none for --baseline), each registered and composable with `overrides`;
    a ConfigError names the first that is not."""
    if options.baseline == (options.method is not None):
        raise ConfigError("give --method NAME[,NAME...] or --baseline (every registered method), not both")
    methods = [name.strip() for name in (options.method or "").split(",") if name.strip()]
    if not methods and not options.baseline:
        raise ConfigError("--method names no method: give one or more registered names, e.g. --method topk,deft")
    for name in methods:
        registry.method(name)  # names the known methods when it is not one
        why = refusal(list(statistics_sweep(name, scale.statistics_workers[:1], scale, overrides).args))
        if why is not None:
            raise ConfigError(f"--method {name}: {why}")
    return methods


def write_cards(out: Path, refused: dict[str, dict[str, str]], scale: Scale,
                overrides: tuple[str, ...]) -> tuple[dict[str, Path], dict[str, dict]]:
    """Every method the folder holds, judged; its record and scorecard written. Returns the
    pages and the records."""
    tables = load_runs([out / folder for folder in VERDICT_FOLDERS if (out / folder).is_dir()], cache=False)
    study = Study.of(tables)
    # A method whose runs diverged or failed is judged too, each failed run named among the parts
    # it could not run: a method that cannot train at the battery's workload (Random-k's statistics
    # runs reach a NaN loss) has that as its result, not a blank row.
    failed = failed_runs(tables.runs, out)
    ran = {*study.runs["sparsifier"], *study.diverged["sparsifier"], *failed}
    present = sorted(name for name in ran if registry.is_method(str(name)))
    refused = {method: {**refused.get(method, {}), **failed.get(method, {})} for method in {*refused, *failed}}
    verdicts = scorecard.field(study, present, per_step(out, scale.per_step, overrides))
    found = scorecard.records(verdicts, refused, measured.provenance([out], None), run_folders(out, study, scale.per_step))
    pages = {}
    for folder in ("records", "scorecards"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    for method, record in found.items():
        record["figures"] = figures(found, method, out / "scorecards")
        (out / "records" / f"{method}.json").write_text(json.dumps(record, indent=2, allow_nan=False) + "\n")
        pages[method] = out / "scorecards" / f"{method}.md"
        pages[method].write_text(scorecard.page(record))
    return pages, found


def failed_runs(runs, out: Path) -> dict[str, dict[str, str]]:
    """method -> "<part> at W=<W>, seed <s>" -> why, for every run of the folder that failed."""
    found: dict[str, dict[str, str]] = {}
    if "status" not in runs.columns:
        return found
    for run in runs[runs["status"] == "failed"].itertuples(index=False):
        part = Path(run.run_id).relative_to(out).parts[0]
        found.setdefault(str(run.sparsifier), {})[f"{part} at W={run.workers}, seed {run.seed}"] = f"the run failed: {run.error}"
    return found


def figures(records: dict[str, dict], method: str, folder: Path) -> dict[str, str]:
    """One figure per measure, `method` highlighted among the others, beside its scorecard:
    measure -> the PNG's name (a measure no method was measured on has none)."""
    names = {}
    for prop in records[method]["measures"]:
        figure = measure_figure(records, prop, method)
        if figure is not None:
            names[prop] = f"{method}_{prop}.png"
            figure.savefig(folder / names[prop])
    return names


def main(argv: list[str] | None = None) -> int:
    options = parse(argv)
    overrides, scale = tuple(options.overrides), QUICK if options.quick else LAPTOP
    try:
        if options.jobs < 1:
            raise ConfigError(f"--jobs {options.jobs}: expected at least 1 (untimed sweeps run at once)")
        methods = checked_methods(options, overrides, scale)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    out = start_study(options.out or keyed_folder(COMPARE_OUT), "compare")
    started = time.monotonic()
    refused = json.loads((out / REFUSED).read_text()) if (out / REFUSED).is_file() else {}
    ledger = Ledger(out) if out.is_dir() else None
    if not options.skip_runs:
        say_if_busy("the selection-time measure times it")
        battery = battery_of(methods, scale)
        print(f"checking the jobs of {len(battery)} methods (run.py's validation at every W)", flush=True)
        per_step_overrides = (threads_override(options.jobs),)
        plans = [plan_method(method, out, scale, overrides, per_step_overrides) for method in battery]
        baselines = per_step_baselines(plans, scale, overrides, per_step_overrides)
        out.mkdir(parents=True, exist_ok=True)
        refused.update({plan.method: plan.refused for plan in plans})
        (out / REFUSED).write_text(json.dumps(refused, indent=2) + "\n")
        ledger = Ledger(out)
        if scale is LAPTOP:
            print(f"the battery of {len(battery)} methods in {out}: about "
                  f"{minutes(estimate_s(plans, baselines, ledger, options.jobs))} here (each part still to run at its "
                  f"measured cost, {options.jobs} sweeps at a time, each selection replay alone: docs/compare.md)", flush=True)
        try:
            run_battery(plans, baselines, out, overrides, options.jobs, ledger)
        finally:  # a stopped study's sessions add up to its wall time
            ledger.add_wall(time.monotonic() - started)
    elif not out.is_dir():
        print(f"error: --skip-runs: {out} does not exist", file=sys.stderr)
        return 2
    pages, records = write_cards(out, refused, scale, overrides)
    for method in methods or list(pages):
        print(f"scorecard: {pages[method]}" if method in pages else f"{method}: no finished runs in {out}")
    print(f"make compare: {minutes(time.monotonic() - started)}, results in {out}")
    if options.publish:
        # The wall time of every session that ran the folder's parts (its ledger); a folder whose
        # runs no session timed (judged again from runs made elsewhere) has none.
        given = sys.argv[1:] if argv is None else argv
        command = "python -m experiments.studies.compare " + " ".join(given)
        wall = ledger.wall_s if ledger is not None and ledger.wall_s > 0 else None
        print(f"published: {publish(out, records, command, wall, options.pages)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
