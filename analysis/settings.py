"""Which config differences make runs incomparable: the report averages runs over seeds only
when they differ in nothing else that changes what is measured.

A group of the report is the runs whose flattened config (`cfg.*` columns of the runs table)
agrees on every key but the IGNORED ones. The method label (analysis.labels) and the group
columns of analysis.stats already tell sparsifiers, their knobs, the density, W, model and
dataset apart (SHOWN_ELSEWHERE); every other key that differs (steps, epochs, max_steps, lr,
model or dataset options, processes, ...) becomes a column of the summary, named without the
`cfg.` prefix, so a reader sees why two rows of one method are two rows.

The machine counts as a setting too: the `env.*` columns (analysis.runinfo.PROVENANCE: CPU
model, torch's CPU capability, BLAS and oneDNN builds, GPUs, torch version) change a run's
numbers with the config unchanged, so runs made on different machines are never averaged
together, and the report names the machine key that tells them apart.
"""
from __future__ import annotations

import pandas as pd

from analysis.labels import format_knob, varying_columns
from analysis.runinfo import PROVENANCE_PREFIX

CONFIG_PREFIX = "cfg."

# Keys (or key prefixes, ending in ".") that do not change what a run measures, and why.
IGNORED = (
    "seed",  # the replicate axis itself: the report averages over it
    "output_root", "data_dir",  # where files are written and datasets looked for
    # where metrics go (local store, W&B) and whether a bar is drawn. NOT logger.log_every: a
    # run's numbers are reduced from its logged rows, so it decides which steps they average.
    # NOT tag either: a user tags runs to tell them apart.
    "logger.name", "logger.wandb_mode", "logger.project", "logger.entity", "logger.progress",
    "checkpoint.",  # when state is saved for a resume: outside the timed step
    "resume",  # which run a resume continues: the resumed run is the same run
    "checksum_every",  # the cross-rank parameter check runs outside the timed step
    "max_skipped_steps",  # only when a diverging run is failed; skipped steps are flagged anyway
    # rendezvous plumbing: how processes find each other, not what they compute
    "launcher.rdzv_endpoint", "launcher.rdzv_id", "launcher.rdzv_timeout_s", "launcher.timeout_s",
    "launcher.max_restarts",
)
# Keys that the report's own columns show already (method label, density, W, model, dataset).
SHOWN_ELSEWHERE = ("sparsifier.", "workers", "model.name", "dataset.name")


def _matches(key: str, patterns: tuple[str, ...]) -> bool:
    return any(key.startswith(p) if p.endswith(".") else key == p for p in patterns)


def setting_columns(runs: pd.DataFrame) -> list[str]:
    """The runs table's `cfg.*` and `env.*` columns that can tell comparable runs apart."""
    return [
        column for column in runs.columns
        if column.startswith(PROVENANCE_PREFIX)
        or (column.startswith(CONFIG_PREFIX) and not _matches(column[len(CONFIG_PREFIX):], IGNORED + SHOWN_ELSEWHERE))
    ]


def differing_keys(rows: pd.DataFrame) -> list[str]:
    """The setting columns that take several values among `rows` (runs or run_stats rows)."""
    return varying_columns(rows, setting_columns(rows))


def key_title(column: str) -> str:
    """"cfg.optimizer.lr" -> "optimizer.lr": a differing key as the report's column names it."""
    return column.removeprefix(CONFIG_PREFIX)


def varying_in(summary: pd.DataFrame) -> list[str]:
    """The differing keys of a summary of analysis.stats.summarize (its `cfg.*` and `env.*` columns)."""
    return [column for column in summary.columns if str(column).startswith((CONFIG_PREFIX, PROVENANCE_PREFIX))]


def as_text(values: pd.Series) -> pd.Series:
    """A setting column as the config writes it: what groups compare (a missing value is `null`;
    3.0 is 3, as in a column that also holds nulls)."""
    return values.map(lambda value: str(int(value)) if isinstance(value, float) and value.is_integer() else format_knob(value))


def settings_labels(runs: pd.DataFrame) -> pd.Series:
    """Per run, its values of the keys that differ across `runs` ("max_steps=3 optimizer.lr=0.1"),
    "" when nothing does: every figure's series and every report row is split by them, so runs
    that differ in more than their seed never share a line, a bar or a mean."""
    columns = differing_keys(runs) if len(runs) else []
    parts = pd.DataFrame({column: f"{key_title(column)}=" + as_text(runs[column]) for column in columns}, index=runs.index)
    return parts.agg(" ".join, axis=1) if columns else pd.Series("", index=runs.index, dtype=object)
