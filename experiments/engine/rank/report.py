"""What a person sees in the terminal: the per-epoch table (rank 0) and the final summary."""
from __future__ import annotations

from typing import Any

from tqdm import tqdm

from experiments.runformat import metric_keys as keys
from experiments.runformat.headline import Headline, headline, task_metric


# The per-epoch table's columns after the epoch and the task metric: the latest logged values.
EPOCH_COLUMNS = (keys.LOSS, keys.SELECT_MAX, keys.SENT_MAX, keys.DENSITY_ERROR, keys.BUILDUP)


def _columns(metric: str) -> tuple[tuple[str, Headline], ...]:
    """(title, headline) per column; titles and formats are the registry's."""
    names = (EPOCH_COLUMNS[0], metric, *EPOCH_COLUMNS[1:])
    return tuple((spec.title, spec) for spec in map(headline, names))


def _cell(value: Any, spec: Headline, width: int) -> str:
    return spec.format(value).rjust(width)


class EpochTable:
    """Prints one row per epoch without breaking the progress bar."""

    def __init__(self, enabled: bool, metric: str = keys.ACCURACY) -> None:
        self.enabled = enabled
        self.columns = _columns(metric)

    def header(self, method: dict[str, Any], numel: int, workers: int, world: str) -> None:
        if not self.enabled:
            return
        described = ", ".join(f"{key}={value}" for key, value in method.items())
        tqdm.write(f"{method['name']} on {workers} workers ({world}); {numel:,} gradient elements; {described}")
        tqdm.write("  ".join(["epoch", *(f"{title:>{max(len(title), 5)}}" for title, _ in self.columns)]))

    def row(self, epoch: int, last: dict[str, Any]) -> None:
        if not self.enabled:
            return
        cells = (_cell(last.get(spec.key), spec, max(len(title), 5)) for title, spec in self.columns)
        tqdm.write("  ".join([f"{epoch:>5d}", *cells]))


# The final summary's lines: (label, names); several names print as "a / b"; label None: the
# registry's label of the one key. Numbers read as in the report (the registry's formats).
SUMMARY_LINES: tuple[tuple[str | None, tuple[str, ...]], ...] = (
    ("select ms, slowest rank / mean over ranks (median step)", (keys.SELECT_MAX, keys.SELECT_MEAN)),
    (None, (keys.SENT_MAX,)),
    (None, (keys.RATIO,)),
    ("density actual |U|/N / target k/N (mean)", (keys.DENSITY_ACTUAL, keys.DENSITY_TARGET)),
    ("density error |U|/k-1: mean / later half of steps", (keys.DENSITY_ERROR, keys.DENSITY_ERROR_SETTLED)),
    (None, (keys.DENSITY_ABS_ERROR,)),
    (None, (keys.BUILDUP,)),
    (None, (keys.LOAD_IMBALANCE,)),
)


def summary_lines(metric: str) -> tuple[tuple[str, tuple[Headline, ...]], ...]:
    """(label, headlines) of every line of the final summary, the run's task metric first."""
    lines = ((task_metric(metric).title + " (last evaluation)", (metric,)), *SUMMARY_LINES)
    return tuple((label or headline(names[0]).label, tuple(map(headline, names))) for label, names in lines)


def format_summary(summary: dict[str, Any], run_dir: str) -> str:
    """The final block run.py prints after the ranks exit."""
    lines = [f"summary ({summary.get('sparsifier', {}).get('name', '?')}, {summary.get('workers')} workers, "
             f"{summary.get('world')}, {summary.get('steps')} steps, {summary.get('wall_s', 0):.1f} s)"]
    source = summary.get("dataset", {}).get("source", "real")
    if source != "real":
        lines.append(f"  data: {source} (not the paper's data)")
    metric = summary.get("task", {}).get("metric", keys.ACCURACY)
    for index, (label, specs) in enumerate(summary_lines(metric)):
        line = f"  {label:<56} " + " / ".join(spec.format(summary.get(spec.key)) for spec in specs)
        if index == 0 and metric in summary and specs[0].format(summary[metric]) == "-":  # null: not finite
            line += "  (last evaluation non-finite: the report flags this run)"
        lines.append(line)
    if summary.get(keys.DIVERGED):  # its numbers are no result: the report leaves it out of its averages
        found = summary[keys.DIVERGED]
        lines.append(f"  DIVERGED at step {found['at_step']}: {found['why']}")
    lines.append(f"  results: {run_dir}")
    return "\n".join(lines)
