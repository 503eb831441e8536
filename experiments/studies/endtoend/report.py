"""The end-to-end answer as tables, one figure per cluster and JSON (docs/endtoend.md).

Per study: its sources, stated once; per cluster, the break-even table (each sparsifier's
per-step speedup over the best dense baseline at each W, with its range over the eight moves:
the largest steps ratio at which it still pays, breakeven.py) and its figure; then the verdict
table wherever a steps ratio is known (verdicts.py), at the headline W.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display here
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FormatStrFormatter  # noqa: E402

from experiments.studies.endtoend.breakeven import Cell  # noqa: E402

Grid = dict[str, dict[int, list[Cell]]]  # network -> W -> every sparsifier's cell
HEADLINE_WORKERS = (8, 32, 128, 1024)  # the verdict table's columns, where modelled


def methods_in(grid: Grid) -> list[str]:
    return sorted({c.method for by_w in grid.values() for cells in by_w.values() for c in cells})


def cell_text(cell: Cell | None) -> str:
    """"1.71x (1.42-1.93)", * when its W is extrapolated."""
    if cell is None:
        return "—"
    spread = "" if cell.low == cell.high else f" ({cell.low:.2f}-{cell.high:.2f})"
    return f"{cell.speedup:.2f}x{spread}" + ("" if cell.hosted else "*")


def breakeven_table(grid: Grid, network: str) -> list[str]:
    methods = methods_in(grid)
    lines = ["| W | best dense step | " + " | ".join(methods) + " |", "|---|---|" + "---|" * len(methods)]
    for workers, cells in sorted(grid[network].items()):
        by_method = {c.method: c for c in cells}
        first = cells[0] if cells else None
        base = f"{first.baseline} {first.baseline_step_ms:.3g} ms" if first else "—"
        lines.append(f"| {workers} | {base} | " + " | ".join(cell_text(by_method.get(m)) for m in methods) + " |")
    return lines


def verdict_table(grid: Grid, verdicts: list[dict[str, Any]], ratios: list[dict[str, Any]]) -> list[str]:
    """Rows: each known steps ratio (method, source, value); columns: cluster x headline W."""
    workers = [w for w in HEADLINE_WORKERS if any(w in by_w for by_w in grid.values())]
    columns = [(n, w) for n in grid for w in workers]
    lines = ["| method | steps ratio (95% interval, seeds) | source | " + " | ".join(f"{n} W={w}" for n, w in columns) + " |",
             "|---|---|---|" + "---|" * len(columns)]
    found = {(v["method"], v["source"], v["network"], v["workers"]): v["word"] for v in verdicts}
    for ratio in sorted(ratios, key=lambda r: (r["method"], r["source"])):
        words = [found.get((ratio["method"], ratio["source"], n, w), "—") for n, w in columns]
        lines.append(f"| {ratio['method']} | {ratio_text(ratio)} | {ratio['source']} ({ratio['workload']}) | "
                     + " | ".join(words) + " |")
    return lines


def ratio_text(ratio: dict[str, Any]) -> str:
    """"1.10 (1.05-1.15), 3 seeds"; a seed short of the target: "at least 1.32, 1 of 3 seeds reached"."""
    seeds = f"{ratio['seeds']} seed{'s' if ratio['seeds'] != 1 else ''}"
    if ratio["mean"] is None:
        bound = "" if ratio["low"] is None else f"at least {ratio['low']:.2f}, "
        final = "" if ratio.get("final") is None else f", final accuracy {ratio['final']:.2%}"
        return f"{bound}{ratio['reached']} of {seeds} reached the target{final}"
    high = "open" if ratio["high"] is None else f"{ratio['high']:.2f}"
    spread = "" if ratio["low"] is None else f" ({ratio['low']:.2f}-{high})"
    return f"{ratio['mean']:.2f}{spread}, {seeds}"


def targets(ratios: list[dict[str, Any]]) -> list[str]:
    """Each source's target once (the ratios of one source share it)."""
    notes = {ratio["source"]: ratio["note"] for ratio in ratios if ratio.get("note")}
    return [f"- {source}: {note}" for source, note in sorted(notes.items())]


def study_markdown(study: dict[str, Any], grid: Grid, figures: dict[str, str] | None = None) -> str:
    """One study's section: sources once, per cluster the figure and the break-even table, the verdicts."""
    lines = [f"## {study['title']}", "", *[f"- {source}" for source in study["sources"]]]
    for network in grid:
        lines += ["", f"### {network}: break-even (per-step speedup over the best dense baseline)", ""]
        if figures and network in figures:
            lines += [f"![{network}]({figures[network]})", ""]
        lines += breakeven_table(grid, network)
    lines += ["", "### Verdict (steps ratio against break-even, at W = "
              + ", ".join(str(w) for w in HEADLINE_WORKERS) + ")", ""]
    if study["ratios"]:
        lines += verdict_table(grid, study["verdicts"], study["ratios"])
        lines += ["", "Targets:", *targets(study["ratios"])] if targets(study["ratios"]) else []
    else:
        lines.append("No steps ratio known: the break-even is the answer (a method pays where its steps "
                     "ratio lies below it).")
    return "\n".join(lines) + "\n"


def figure(grid: Grid, network: str, title: str, path: Path) -> Path:
    """Per-step speedup against W (log-x), one line per sparsifier, its range shaded, 1.0 marked."""
    fig, axis = plt.subplots(figsize=(6.0, 4.0))
    for method in methods_in(grid):
        cells = [c for _, by_w in sorted(grid[network].items()) for c in by_w if c.method == method]
        if cells:
            xs = [c.workers for c in cells]
            line, = axis.plot(xs, [c.speedup for c in cells], marker="o", markersize=3, label=method)
            axis.fill_between(xs, [c.low for c in cells], [c.high for c in cells], color=line.get_color(), alpha=0.12)
    axis.axhline(1.0, color="black", linewidth=0.9, linestyle="--", label="1.0: pays per step")
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    workers = sorted(grid[network])
    axis.set_xticks(workers, [str(w) for w in workers])  # 4 ... 1024, not powers of two
    for set_formatter in (axis.yaxis.set_major_formatter, axis.yaxis.set_minor_formatter):
        set_formatter(FormatStrFormatter("%.2g"))  # 0.6, not 6 x 10^-1
    axis.set_xlabel("workers W")
    axis.set_ylabel("per-step speedup over best dense = break-even")
    axis.set_title(f"{title}\n{network}", fontsize=9)
    axis.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_json(path: Path, studies: dict[str, dict[str, Any]]) -> None:
    """Every cell with its moves, the ratios, the verdicts and each study's sources."""
    serial = {name: {**{k: v for k, v in study.items() if k != "grid"},
                     "cells": [asdict(c) for by_w in study["grid"].values() for cells in by_w.values() for c in cells]}
              for name, study in studies.items()}
    path.write_text(json.dumps(serial, indent=1))


def grid_of(cells: list[dict[str, Any]], networks: list[str]) -> Grid:
    """The grid again from write_json's cells, clusters in the study's order."""
    grid: Grid = {n: {} for n in networks}
    for serial in cells:
        cell = Cell(**serial)
        grid[cell.network].setdefault(cell.workers, []).append(cell)
    return grid


def measured_page(serial: dict[str, dict[str, Any]]) -> str:
    """docs/measured/endtoend.md's body, from endtoend.json (analysis/measured.py)."""
    return "\n".join(study_markdown(study, grid_of(study["cells"], study["networks"]), study.get("figures"))
                     for study in serial.values())
