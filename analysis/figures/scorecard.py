"""A scorecard's figures (analysis/scorecard.py): one per measure, every method's value as a bar,
best first, the scorecard's own method highlighted among the others."""
from __future__ import annotations

from matplotlib.figure import Figure

from analysis.figures.style import new_figure

HIGHLIGHT, OTHERS = "tab:red", "0.7"


def measured(records: dict[str, dict], prop: str) -> list[tuple[str, float]]:
    """(method, value) of every method measured on `prop`, best first (the records' ranks)."""
    found = [(method, record["measures"][prop]) for method, record in records.items()]
    return [(method, one["value"]) for method, one in sorted(found, key=lambda item: (item[1]["rank"] or 0, item[0]))
            if one["value"] is not None]


def measure_figure(records: dict[str, dict], prop: str, method: str) -> Figure | None:
    """The bars of `prop`'s measure, `method`'s highlighted; None when no method was measured."""
    bars = measured(records, prop)
    if not bars:
        return None
    one = records[method]["measures"][prop]
    fig, axes = new_figure(width=6.0, height=1.0 + 0.3 * len(bars))
    ax = axes.flat[0]
    names = [name for name, _ in bars][::-1]  # the best at the top
    ax.barh(names, [value for _, value in bars][::-1], color=[HIGHLIGHT if name == method else OTHERS for name in names])
    ax.set_xlabel(one["measure"], fontsize=9)
    better = "higher" if one["higher_is_better"] else "lower"
    ax.set_title(f"{method}: " + (f"rank {one['rank']} of {one['of']}" if one["rank"] else "not measured")
                 + f" ({better} is better)", fontsize=9)
    return fig
