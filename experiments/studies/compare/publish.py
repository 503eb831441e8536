"""What `make compare` writes besides running: each method's run folders per part of the battery
(the runs every scorecard and leaderboard cell was computed from), and the leaderboard page
`docs/measured/leaderboard.md` with its sortable table beside it (analysis/leaderboard.py), from
the records of every method the study folder holds (docs/compare.md).
"""
from __future__ import annotations

from pathlib import Path

from analysis import leaderboard, measured
from analysis.claims.study import Study
from experiments.engine.launcher.environment import REPO_ROOT
from experiments.studies.compare.pays import PerStepScale
from experiments.studies.endtoend.assemble import finished_runs
from sparsifiers import registry

PER_STEP = "per-step"  # the part's name in the records (analysis/scorecard.py's MEASURES)
LEADERBOARD = "leaderboard"


def shown(path: Path) -> str:
    """A folder as the pages name it: relative to the repository when inside it."""
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def run_folders(out: Path, study: Study, scale: PerStepScale) -> dict[str, dict[str, list[str]]]:
    """method -> part of the battery -> its run folders, relative to `out`: the verdicts' runs by
    their first folder (statistics, convergence, selection), the per-step part's by the end-to-end
    study's (a method's own statistics runs and the dense baselines' it is priced against)."""
    found: dict[str, dict[str, list[str]]] = {}
    for run, method in sorted(zip(study.runs["run_id"], study.runs["sparsifier"])):
        relative = Path(run).relative_to(out)
        found.setdefault(str(method), {}).setdefault(relative.parts[0], []).append(str(relative))
    folder = out / scale.study.name
    runs = [path.relative_to(out) for path in finished_runs(folder)] if folder.is_dir() else []
    base = [str(path) for path in runs if path.parts[1] == "base"]
    for path in runs:
        method = path.parts[1].removeprefix("statistics_")
        if path.parts[1] != "base" and method in found:
            found[method].setdefault(PER_STEP, []).append(str(path))
    for method, parts in found.items():
        if PER_STEP in parts:
            parts[PER_STEP] += base
    return found


def publish(out: Path, records: dict[str, dict], command: str, wall: float | None, pages: Path = measured.PAGES) -> Path:
    """The leaderboard of every method the folder holds (every registered one named, run or not),
    published as a measured page with its HTML table beside it; returns the page."""
    board = leaderboard.data(records, list(registry.names()), shown(out))
    return measured.publish(LEADERBOARD, "The leaderboard: every method against the field, as make compare measured it",
                            command, "analysis.leaderboard:page", board, measured.provenance([out], wall), pages,
                            render_html="analysis.leaderboard:html")
