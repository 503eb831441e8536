"""What the end-to-end model reads from a finished run: the statistics the exchange cost depends
on, the step's ledger, the measured times, and the metric curve.

Statistics are medians over the logged steps in [settle, until) (a method's threshold or
partitions need some steps to settle, and training moves the statistics on: every run of a
study, at every W, is read over the same steps), taken from metrics.jsonl as the runner logged
them:

- |U| = density/actual * N (the coordinates aggregated), k_max = selection/k_max (the busiest
  rank's count, which sets the padded index all-gather);
- the ledger (traffic/ledger) of the logged step whose (k_max, |U|) is nearest those medians: the
  template a modelled step replays (experiments/studies/endtoend/ledger.py);
- compute and selection ms: the medians of time/compute_ms_mean (one rank's forward+backward) and
  time/select_ms_max (the slowest rank's selection, the plan included);
- for a split method logged with position_bins > 0, its replay at other W (structure.py).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from experiments.runformat import metric_keys as keys
from experiments.engine.core import ledger as ledger_text
from experiments.engine.core.ledger import Collective
from experiments.studies.endtoend.structure import Histograms, Structure, structure_of
from experiments.runformat.run_dir import CONFIG, METRICS, SUMMARY, read_json, read_metrics


@dataclass(frozen=True)
class RunStats:
    """One finished run, reduced to what the end-to-end model needs."""

    path: Path
    method: str  # the sparsifier config's name (dense, dense_bf16, powersgd, topk, ...)
    exchange: str  # the exchange kind
    scope: str  # whole | split
    workers: int
    numel: int
    k: int  # the target count floor(density * N)
    union: float  # median |U| over the window
    k_max: float  # median selection/k_max over the window
    template: tuple[Collective, ...]  # a logged step's ledger (module docstring)
    template_union: int
    template_k_max: int
    plan: int | None  # the payload of the template's leader broadcast (its last broadcast), if any
    compute_ms: float
    select_ms: float
    curve: tuple[tuple[int, float], ...]  # (steps done, headline metric) of every evaluation
    metric: str  # the headline eval key
    overlap: bool  # DDP runs its exchange bucket by bucket (a dense baseline with overlap, PowerSGD)
    structure: Structure | None = None  # a split method's replay at other W (position_bins > 0)
    seed: int = 0

    @property
    def label(self) -> str:
        return self.method


def read_run(path: Path, settle: int, until: int, metric: str) -> RunStats:
    """The RunStats of the run in `path` (its summary.json and metrics.jsonl)."""
    summary = read_json(path / SUMMARY)
    if summary is None:
        raise ValueError(f"{path} has no {SUMMARY}: the run did not finish")
    rows = read_metrics(path / METRICS)
    train = [r for r in rows if r.get(keys.ROW_KIND) == keys.KIND_TRAIN and keys.LEDGER in r]
    # A run shorter than the window (the test suite's) is read over its last logged step.
    window = [r for r in train if settle <= r[keys.ROW_STEP] < until] or train[-1:]
    if not window:
        raise ValueError(f"{path}: no logged step carries {keys.LEDGER} (a run from before the ledger was logged)")
    numel = int(summary["numel"])
    unions = [r[keys.DENSITY_ACTUAL] * numel for r in window]
    k_maxes = [r[keys.K_MAX] for r in window]
    union, k_max = statistics.median(unions), statistics.median(k_maxes)
    nearest = min(window, key=lambda r: abs(r[keys.K_MAX] - k_max) / max(k_max, 1)
                  + abs(r[keys.DENSITY_ACTUAL] * numel - union) / max(union, 1))
    sparsifier: dict[str, Any] = summary["sparsifier"]
    # The config's name tells the presets of one class apart (dense, dense_bf16, dense_overlap).
    config = yaml.safe_load((path / CONFIG).read_text()) if (path / CONFIG).is_file() else {}
    method = str((config.get("sparsifier") or {}).get("name") or sparsifier["name"])
    curve = tuple((int(r[keys.ROW_STEP]) + 1, float(r[metric])) for r in rows
                  if r.get(keys.ROW_KIND) == keys.KIND_EVAL and r.get(metric) is not None)
    histograms = [Histograms(int(r[keys.ROW_STEP]), np.asarray(r[keys.POSITIONS], dtype=np.float64),
                             np.asarray(r[keys.ENERGY], dtype=np.float64)) for r in train if keys.POSITIONS in r]
    k = int(summary.get("k_target") or sparsifier.get("k") or numel)
    return RunStats(
        path=path, method=method, exchange=str(sparsifier["exchange"]),
        scope=str(sparsifier.get("scope", "whole")), workers=int(summary["workers"]), numel=numel,
        k=k, union=union, k_max=k_max,
        template=(template := tuple(ledger_text.decode(nearest[keys.LEDGER]))),
        plan=next((c.elements for c in reversed(template) if c.op == "broadcast"), None),
        template_union=round(nearest[keys.DENSITY_ACTUAL] * numel), template_k_max=int(nearest[keys.K_MAX]),
        compute_ms=statistics.median(r[keys.COMPUTE_MEAN] for r in window if keys.COMPUTE_MEAN in r),
        select_ms=statistics.median(r[keys.SELECT_MAX] for r in window if keys.SELECT_MAX in r),
        curve=curve, metric=metric,
        # torch's PowerSGD hook runs per bucket too; a dense preset says so with `overlap`.
        overlap=bool(sparsifier.get("overlap", False)) or sparsifier["exchange"] == "low_rank",
        structure=structure_of(str(sparsifier["name"]), numel, k, histograms, settle, until, sparsifier,
                               tuple(summary.get("tensor_numels") or ())),
        seed=int(config.get("seed") or 0))
