"""The end-to-end comparison as tables, a figure and JSON.

Per study and network: the modelled time to the target of the best dense baseline and of every
sparsifier at each W, and each sparsifier's speedup over that baseline (> 1: it pays), each with
its range over the seeds' interval (uncertainty.py); the W from which each sparsifier pays; and
"what would I pick": the fastest method per network and W, named only when its interval separates
from every other method's, else a tie within noise.
"""
from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display here
import matplotlib.pyplot as plt  # noqa: E402

from experiments.studies.endtoend.model import DENSE_BASELINES, Point, best, pick  # noqa: E402
from experiments.studies.endtoend.uncertainty import TIE, interval_text  # noqa: E402

Grid = dict[str, dict[int, list[Point]]]  # network -> W -> every method's point


def speedup(point: Point, baseline: Point | None) -> float | None:
    if baseline is None or point.time_to_target_s is None:
        return None
    return baseline.time_to_target_s / point.time_to_target_s


def speedup_range(point: Point, baseline: Point) -> tuple[float, float]:
    """The speedup's range over both intervals: the baseline's fastest end over the point's
    slowest, to the reverse (both closed: each has a mean, every seed reached the target)."""
    (base_low, base_high), (low, high) = baseline.time_interval_s, point.time_interval_s
    return base_low / high, base_high / low if low > 0 else float("inf")


def sparsifiers_in(grid: Grid) -> list[str]:
    names = {p.method for by_w in grid.values() for points in by_w.values() for p in points}
    return sorted(n for n in names if n not in DENSE_BASELINES)


def pays_from(grid: Grid, network: str, method: str) -> int | None:
    """The smallest W at which `method` beats the best dense baseline, or None."""
    for workers, points in sorted(grid[network].items()):
        mine = next((p for p in points if p.method == method), None)
        gain = speedup(mine, best(points, dense=True)) if mine else None
        if gain is not None and gain > 1:
            return workers
    return None


def _time(point: Point | None) -> str:
    if point is None or point.time_to_target_s is None:
        return "not reached"
    low, high = point.time_interval_s
    return f"{point.time_to_target_s:.3g} s" + ("" if low == high else f" ({interval_text(low, high)})")


def network_table(grid: Grid, network: str) -> list[str]:
    methods = sparsifiers_in(grid)
    lines = ["| W | best dense baseline | " + " | ".join(methods) + " |",
             "|---|---|" + "---|" * len(methods)]
    for workers, points in sorted(grid[network].items()):
        baseline = best(points, dense=True)
        cells = []
        for method in methods:
            mine = next((p for p in points if p.method == method), None)
            gain = speedup(mine, baseline) if mine else None
            if gain is None:
                cells.append("—")
                continue
            low, high = speedup_range(mine, baseline)
            spread = "" if low == high else f" ({interval_text(low, high, '.2f')})"
            cells.append(f"{gain:.2f}x{spread}" + ("" if mine.hosted else "*"))
        name = f"{baseline.method} {_time(baseline)}" if baseline else "none reached"
        lines.append(f"| {workers} | {name} | " + " | ".join(cells) + " |")
    return lines


def pick_table(grid: Grid) -> list[str]:
    networks = list(grid)
    workers = sorted(next(iter(grid.values())))
    lines = ["| W | " + " | ".join(networks) + " |", "|---|" + "---|" * len(networks)]
    for w in workers:
        cells = []
        for network in networks:
            cells.append(pick_cell(grid[network][w]))
        lines.append(f"| {w} | " + " | ".join(cells) + " |")
    return lines


def pick_cell(points: list[Point]) -> str:
    """The fastest method and its time, or the tie within noise (model.pick)."""
    fastest, tied = pick(points)
    if fastest is None:
        return "—"
    if tied:
        return f"{TIE}: " + ", ".join(p.method for p in [fastest, *tied])
    return f"{fastest.method} ({_time(fastest)})"


def robustness_table(grid: Grid, robustness: dict[str, dict[str, str]]) -> list[str]:
    """Each pick's verdict under the stated ranges (robustness.py), laid out as pick_table."""
    networks = list(grid)
    lines = ["| W | " + " | ".join(networks) + " |", "|---|" + "---|" * len(networks)]
    for w in sorted(next(iter(grid.values()))):
        lines.append(f"| {w} | " + " | ".join(robustness[network][str(w)] for network in networks) + " |")
    return lines


def study_markdown(title: str, target_line: str, sources: list[str], grid: Grid,
                   robustness: dict[str, dict[str, str]] | None = None) -> str:
    lines = [f"## {title}", "", target_line, ""]
    lines += [f"- {source}" for source in sources]
    for network in grid:
        lines += ["", f"### {network}: speedup of each sparsifier over the best dense baseline", "",
                  *network_table(grid, network), ""]
        paying = [f"{m} from W = {pays_from(grid, network, m)}" for m in sparsifiers_in(grid) if pays_from(grid, network, m)]
        lines.append("Pays: " + (", ".join(paying) if paying else "no sparsifier, at any W modelled") + ".")
    lines += ["", "### What would I pick (fastest to the target)", "",
              "Named when its 95% interval of time to the target lies below every other method's; "
              f"else \"{TIE}\" and the methods whose intervals overlap the fastest's (docs/endtoend.md).",
              "", *pick_table(grid), ""]
    if robustness:
        lines += ["### How robust each pick is", "",
                  "Modelled again with one input at each end of its range, the others as they were: alpha x0.5 "
                  "and x2, beta efficiency 0.7 and 1, compute -30% and +30%, selection -50% and +50% "
                  "(docs/endtoend.md). \"robust\": the same pick at all eight; else what changes it, and to what.",
                  "", *robustness_table(grid, robustness), ""]
    return "\n".join(lines)


def figure(grid: Grid, title: str, path: Path) -> Path:
    """Speedup over the best dense baseline against W, one panel per network."""
    networks = list(grid)
    fig, axes = plt.subplots(1, len(networks), figsize=(4.2 * len(networks), 3.6), sharey=True, squeeze=False)
    for axis, network in zip(axes[0], networks):
        for method in sparsifiers_in(grid):
            xs, ys = [], []
            for workers, points in sorted(grid[network].items()):
                mine = next((p for p in points if p.method == method), None)
                gain = speedup(mine, best(points, dense=True)) if mine else None
                if gain is not None:
                    xs.append(workers)
                    ys.append(gain)
            if xs:
                axis.plot(xs, ys, marker="o", markersize=3, label=method)
        axis.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_title(network, fontsize=9)
        axis.set_xlabel("workers W")
    axes[0][0].set_ylabel("speedup over best dense (time to target)")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_json(path: Path, studies: dict[str, dict]) -> None:
    """Every point with every term of its step, and each study's sources."""
    serial = {}
    for name, study in studies.items():
        grid: Grid = study["grid"]
        serial[name] = {**{k: v for k, v in study.items() if k != "grid"},
                        "points": [{**asdict(p), "step_ms": p.step_ms, "time_to_target_s": p.time_to_target_s,
                                    "time_interval_s": p.time_interval_s}
                                   for by_w in grid.values() for points in by_w.values() for p in points]}
    path.write_text(json.dumps(serial, indent=1))


def grid_of(points: list[dict[str, Any]]) -> Grid:
    """The grid again from write_json's points (networks and W in the order they were written)."""
    names = {field.name for field in fields(Point)}
    grid: Grid = {}
    for serial in points:
        point = Point(**{key: tuple(value) if key == "steps_interval" and value is not None else value
                         for key, value in serial.items() if key in names})
        grid.setdefault(point.network, {}).setdefault(point.workers, []).append(point)
    return grid


def target_line(metric: str, target: float, profile: str) -> str:
    return f"Target: {metric} >= {target:g}; compute profile `{profile}`."


def measured_page(serial: dict[str, dict[str, Any]]) -> str:
    """docs/measured/endtoend.md's body, from endtoend.json (analysis/measured.py): every study's
    tables, rendered by the functions that wrote the study's own endtoend.md."""
    return "\n".join(
        study_markdown(study["title"], target_line(study["metric"], study["target"], study["profile"]),
                       study["sources"], grid_of(study["points"]), study.get("robustness"))
        for study in serial.values())
