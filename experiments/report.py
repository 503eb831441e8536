"""What a person sees in the terminal: the per-epoch table (rank 0) and the final summary."""
from __future__ import annotations

from typing import Any

from tqdm import tqdm


def _task_metric(metric: str) -> tuple[str, str, str]:
    """(column title, summary label, format) of a task's headline metric; the analysis package
    holds the one table of labels and formats (analysis/tasks.py)."""
    from analysis.tasks import metric_spec

    spec = metric_spec(metric)
    title = {"accuracy": "eval acc"}.get(spec.label, spec.label)
    return title, spec.title, spec.fmt


def _columns(metric: str) -> tuple[tuple[str, str, str], ...]:
    title, _, fmt = _task_metric(metric)
    return (
        ("epoch", "epoch", "{:>5d}"),
        ("train loss", "train/loss", "{:>10.4f}"),
        (title, metric, "{:>8" + fmt[2:]),
        ("select ms", "time/select_ms_max", "{:>9.3f}"),
        ("MB sent/step", "traffic/sent_bytes_max", "{:>12.4f}"),
        ("dens err", "density/error", "{:>+8.3f}"),
        ("build-up", "buildup", "{:>8.3f}"),
    )


def _cell(value: Any, fmt: str, width: int) -> str:
    if value is None:
        return "-".rjust(width)
    return fmt.format(value)


class EpochTable:
    """Prints one row per epoch without breaking the progress bar."""

    def __init__(self, enabled: bool, metric: str = "eval/accuracy") -> None:
        self.enabled = enabled
        self.columns = _columns(metric)

    def header(self, method: dict[str, Any], numel: int, workers: int, world: str) -> None:
        if not self.enabled:
            return
        described = ", ".join(f"{key}={value}" for key, value in method.items())
        tqdm.write(f"{method['name']} on {workers} workers ({world}); {numel:,} gradient elements; {described}")
        tqdm.write("  ".join(f"{title:>{max(len(title), 5)}}" for title, _, _ in self.columns))

    def row(self, epoch: int, last: dict[str, Any]) -> None:
        if not self.enabled:
            return
        values = dict(last, epoch=epoch)
        if values.get("traffic/sent_bytes_max") is not None:
            values["traffic/sent_bytes_max"] = values["traffic/sent_bytes_max"] / 1e6
        tqdm.write("  ".join(_cell(values.get(key), fmt, max(len(title), 5)) for title, key, fmt in self.columns))


# (label, [(summary key, format, scale), ...]): several keys print as "a / b".
SUMMARY_LINES = (
    ("select ms (max / mean over ranks, median step)", [("time/select_ms_max", "{:.3f}", 1.0),
                                                        ("time/select_ms_mean", "{:.3f}", 1.0)]),
    ("MB sent per rank per step (max)", [("traffic/sent_bytes_max", "{:.4f}", 1e-6)]),
    ("traffic vs dense allreduce", [("traffic/ratio", "{:.4f}", 1.0)]),
    ("density actual / target", [("density/actual", "{:.5f}", 1.0), ("density/target", "{:.5f}", 1.0)]),
    ("density error (mean)", [("density/error", "{:+.4f}", 1.0)]),
    ("build-up (mean)", [("buildup", "{:.3f}", 1.0)]),
    ("load imbalance (mean)", [("selection/load_imbalance", "{:.3f}", 1.0)]),
)


def format_summary(summary: dict[str, Any], run_dir: str) -> str:
    """The final block run.py prints after the ranks exit."""
    def cell(key: str, fmt: str, scale: float) -> str:
        value = summary.get(key)
        return "-" if value is None else fmt.format(value * scale)

    lines = [f"summary ({summary.get('sparsifier', {}).get('name', '?')}, {summary.get('workers')} workers, "
             f"{summary.get('world')}, {summary.get('steps')} steps, {summary.get('wall_s', 0):.1f} s)"]
    source = summary.get("dataset", {}).get("source", "real")
    if source != "real":
        lines.append(f"  data: {source} (not the paper's data)")
    metric = summary.get("task", {}).get("metric", "eval/accuracy")
    _, label, fmt = _task_metric(metric)
    for label, keys in ((label, [(metric, fmt, 1.0)]), *SUMMARY_LINES):
        lines.append(f"  {label:<48} " + " / ".join(cell(*key) for key in keys))
    lines.append(f"  results: {run_dir}")
    return "\n".join(lines)
