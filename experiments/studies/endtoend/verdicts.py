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


def steps_ratios(convergence: Path | None, steps_from: Path | None) -> list[Any]:
    """Every known StepsRatio: from the convergence sweep's runs under `convergence`, from the
    runs under `steps_from`, and the papers' reported ones. A folder's ratios are refused with the
    reason (mixed workloads, densities or devices) by steps_ratios_from_runs."""
    from experiments.studies.endtoend import steps_ratio  # the steps ratio's module (item 3 of issue 46)

    ratios = []
    for folder in (convergence, steps_from):
        if folder is not None:
            runs = finished_runs(folder)
            if not runs:
                raise SystemExit(f"{folder}: no finished run to read steps ratios from")
            ratios += list(steps_ratio.steps_ratios_from_runs(runs).values())
    return ratios + list(steps_ratio.reported_ratios().values())


def verdict_of(cell: Cell, ratio: Any) -> dict[str, Any]:
    """The verdict of one cell against one steps ratio (verdict.pays_verdict), as the JSON holds it."""
    from experiments.studies.endtoend.verdict import BreakEven, pays_verdict

    word, text = pays_verdict(ratio, BreakEven(cell.speedup, cell.low, cell.high))
    return {"method": cell.method, "network": cell.network, "workers": cell.workers,
            "source": ratio.source, "workload": ratio.workload, "word": word, "text": text}


def verdicts(grid: dict[str, dict[int, list[Cell]]], ratios: list[Any]) -> list[dict[str, Any]]:
    """A verdict for every cell whose method has a known steps ratio, one per ratio of it."""
    by_method: dict[str, list[Any]] = {}
    for ratio in ratios:
        by_method.setdefault(ratio.method, []).append(ratio)
    return [verdict_of(cell, ratio) for by_w in grid.values() for cells in by_w.values()
            for cell in cells for ratio in by_method.get(cell.method, ())]


def ratio_json(ratio: Any) -> dict[str, Any]:
    """A StepsRatio as JSON (an open upper end, math.inf, written as null)."""
    serial = asdict(ratio)
    if serial.get("high") == float("inf"):
        serial["high"] = None
    return serial
