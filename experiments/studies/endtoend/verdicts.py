"""The second factor, and the verdict where it is known: each sparsifier's steps ratio (steps to
the target over the best dense baseline's) from the sources that measure it, set against its
break-even (breakeven.py) by the verdict rule (verdict.py).

The steps ratios come from steps_ratio.py: the laptop convergence sweep's runs, a folder of runs
(`--steps-from DIR`) and the papers' reported numbers. Where no ratio is known for a method the
break-even alone is the answer. This module only gathers and applies them.
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from experiments.studies.endtoend.assemble import finished_runs
from experiments.studies.endtoend.breakeven import Cell
from experiments.studies.endtoend.convergence import FOLDER
from experiments.studies.endtoend.steps_ratio import DEFAULT_TOLERANCE, StepsRatio, reported_ratios, steps_ratios_from_runs
from experiments.studies.endtoend.verdict import BreakEven, pays_verdict

LAPTOP_SWEEP = "laptop convergence sweep"


def runs_folder(folder: Path) -> Path:
    """The folder whose runs are read: `folder` itself, or its convergence sweep's folder where it
    holds one (the output of make reproduce LONG=1 or of make endtoend: their other sweeps are
    statistics runs of other lengths and worker counts)."""
    return folder / FOLDER if (folder / FOLDER).is_dir() else folder


def ratios_in(folder: Path, source: str, tolerance: float) -> list[StepsRatio]:
    """The steps ratios of the finished runs under `folder` (steps_ratios_from_runs refuses a
    folder that mixes workloads, densities or devices, with the reason)."""
    runs = finished_runs(folder)
    if not runs:
        raise SystemExit(f"{folder}: no finished run to read steps ratios from")
    try:
        return list(steps_ratios_from_runs(runs, tolerance, source).values())
    except ValueError as refusal:
        raise SystemExit(f"steps ratio refused: {refusal}") from None


def given_ratios(steps_from: Path | None, tolerance: float = DEFAULT_TOLERANCE) -> list[StepsRatio]:
    """The steps ratios known before any run: those of the runs under `--steps-from` (read, or
    refused, before the sweeps start) and the papers' reported ones."""
    ratios = []
    if steps_from is not None:
        folder = runs_folder(steps_from)
        ratios = ratios_in(folder, f"runs in {'/'.join(folder.resolve().parts[-2:])}", tolerance)
    return ratios + list(reported_ratios().values())


def laptop_ratios(out: Path, tolerance: float = DEFAULT_TOLERANCE) -> list[StepsRatio]:
    """The laptop convergence sweep's steps ratios, where `out` holds its runs."""
    return ratios_in(out / FOLDER, LAPTOP_SWEEP, tolerance) if (out / FOLDER).is_dir() else []


def verdict_of(cell: Cell, ratio: StepsRatio) -> dict[str, Any]:
    """The verdict of one cell against one steps ratio (verdict.pays_verdict), as the JSON holds it."""
    word, text = pays_verdict(ratio, BreakEven(cell.speedup, cell.low, cell.high))
    return {"method": cell.method, "network": cell.network, "workers": cell.workers,
            "source": ratio.source, "workload": ratio.workload, "word": word, "text": text}


def verdicts(grid: dict[str, dict[int, list[Cell]]], ratios: list[StepsRatio]) -> list[dict[str, Any]]:
    """A verdict for every cell whose method has a known steps ratio, one per ratio of it."""
    by_method: dict[str, list[StepsRatio]] = {}
    for ratio in ratios:
        by_method.setdefault(ratio.method, []).append(ratio)
    return [verdict_of(cell, ratio) for by_w in grid.values() for cells in by_w.values()
            for cell in cells for ratio in by_method.get(cell.method, ())]


def ratio_json(ratio: StepsRatio) -> dict[str, Any]:
    """A StepsRatio as JSON (an open upper end, math.inf, written as null)."""
    serial = asdict(ratio)
    if serial.get("high") == float("inf"):
        serial["high"] = None
    return serial
