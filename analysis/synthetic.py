"""Synthetic run directories in the local store's format, for the load benchmark and the tests.

The numbers are plausible, not simulated: densities drift around their target, threshold methods
log a threshold, ExDyna logs partition boundaries and DEFT its per-unit lists, so that every
figure has something to draw. Each run has a task (classification, language_model,
recommendation) whose eval rows carry that task's metrics, and summary.json records the task and
the data source under the runner's keys (`task`, `dataset`, `schedule`); `legacy` writes a run as
the runner did before tasks existed. Nothing here is used to analyse real runs.

Rows carry the keys the runner and each sparsifier really log (experiments/runformat/metric_keys.py; a
test compares the key sets with real runs), and the files are written by experiments/runformat/run_dir.py.
"""
from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from experiments.runformat import metric_keys as k
from experiments.runformat import run_dir as files
from experiments.runformat.runtime import world_kind
from sparsifiers import registry

NUMEL = 100_000
UNITS = 12
# task kind -> (headline metric, higher is better, default model, default dataset)
TASKS = {
    "classification": (k.ACCURACY, True, "mlp", "synthetic"),
    "language_model": (k.PERPLEXITY, False, "lstm", "wikitext2"),
    "recommendation": (k.HR10, True, "ncf", "movielens"),
}
# The threshold-controlled methods (they log sparsifier/threshold), and the partition methods
# (they log selection/scanned).
THRESHOLDED = registry.names(thresholded=True)
SCANNING = registry.names(partitioned=True)


@dataclass(frozen=True)
class SyntheticRun:
    """What one synthetic run is."""

    method: str
    workers: int
    seed: int = 0
    steps: int = 100  # logged train rows
    epochs: int = 4  # eval rows
    density: float = 0.01
    status: str = "done"  # done | failed | running
    cut: bool = False  # end metrics.jsonl with half a line, as a killed run does
    group: str = "synthetic"
    task: str = "classification"  # a key of TASKS
    source: str = "real"  # summary.json's dataset.source: "real" or "stand-in: <what>"
    model: str | None = None  # None: the task's default (TASKS)
    dataset: str | None = None
    knobs: tuple[tuple[str, object], ...] = ()  # extra sparsifier config, e.g. (("momentum", 0.0),)
    legacy: bool = False  # summary.json without task, dataset and schedule (runs before tasks)
    tag: str = ""  # the run's `tag` (an experiment's, e.g. "paper/selection_time")

    @property
    def metric(self) -> str:
        return TASKS[self.task][0]

    @property
    def names(self) -> tuple[str, str]:
        """(model, dataset) as the config names them."""
        _, _, model, dataset = TASKS[self.task]
        return self.model or model, self.dataset or dataset


def metrics_text(run: SyntheticRun) -> str:
    """The content of the run's metrics.jsonl (cut mid-line when `run.cut`)."""
    density = 1.0 if run.method == "dense" else run.density
    rng = np.random.default_rng(zlib.crc32(f"{run.method}/{run.workers}/{run.seed}/{run.task}/{run.knobs}".encode()))
    text = files.metrics_text(_rows(run, density, rng))
    first = text[: text.index("\n")]
    return text + first[: len(first) // 2] if run.cut else text


def write_run(run_dir: Path, run: SyntheticRun, metrics: str | None = None) -> Path:
    """Writes one run directory and returns it; `metrics` reuses a metrics_text already made."""
    run_dir.mkdir(parents=True, exist_ok=True)
    density = 1.0 if run.method == "dense" else run.density
    processes = 1
    model, dataset = run.names
    config = {
        "sparsifier": {"_target_": f"sparsifiers.{run.method}", "name": run.method, "density": density, **dict(run.knobs)},
        "model": {"name": model}, "dataset": {"name": dataset}, "optimizer": {"name": "sgd", "lr": 0.1},
        "logger": {"name": "local", "log_every": 1},
        "workers": run.workers, "processes": processes, "epochs": run.epochs, "seed": run.seed, "warmup_steps": 5,
        "tag": run.tag,
    }
    if not run.legacy:
        config["schedule"] = {"name": "constant"}
    # sync=False: the load benchmark writes thousands of these; none must survive a power cut.
    files.write_yaml(run_dir / files.CONFIG, config, sync=False)
    env = {"resolved": {"world": world_kind(run.workers, processes), "processes": processes}, "job": {"group": run.group}}
    files.write_json(run_dir / files.ENV, env, sync=False)
    metrics = metrics if metrics is not None else metrics_text(run)
    files.write_atomic(run_dir / files.METRICS, metrics, sync=False)
    status: dict = {"status": run.status}
    if run.status == "failed":
        status["error"] = "rank0: RuntimeError: synthetic failure"
    files.write_json(run_dir / files.STATUS, status, sync=False)
    if run.status == "done":
        files.write_json(run_dir / files.SUMMARY, _summary(run, metrics), sync=False)
    return run_dir


def _summary(run: SyntheticRun, metrics: str) -> dict:
    """summary.json: the last evaluation's metrics and, unless legacy, task, dataset and schedule."""
    # From the end: the benchmark writes 1,000 runs of 1,000 steps, too many lines to parse each.
    eval_marker = json.dumps({k.ROW_KIND: k.KIND_EVAL})[1:-1]  # '"kind": "eval"', as dumps writes it
    last_eval = next((json.loads(line) for line in reversed(metrics.splitlines()) if eval_marker in line), {})
    summary = {key: value for key, value in last_eval.items() if key.startswith(k.EVAL_PREFIX)}
    summary["steps"] = run.steps
    if run.legacy:
        return summary
    metric, higher_is_better, _, _ = TASKS[run.task]
    # N and k as the runner records them (experiments/engine/rank/train.py): DEFT's k_l formula needs k.
    summary["numel"] = NUMEL
    summary["k_target"] = max(1, int((1.0 if run.method == "dense" else run.density) * NUMEL))
    summary["task"] = {"kind": run.task, "metric": metric, "higher_is_better": higher_is_better}
    summary["dataset"] = {"name": run.names[1], "task": run.task, "source": run.source, "train": 1000, "test": 200}
    summary["schedule"] = {"name": "constant", "lr": 0.1}
    return summary


def write_sweep(root: Path, methods: list[str], workers: list[int], seeds: int = 1, **options) -> list[Path]:
    """One run per (method, workers, seed), named like a Hydra sweep's jobs."""
    runs, number = [], 0
    for seed in range(seeds):
        for method in methods:
            for count in workers:
                run = SyntheticRun(method=method, workers=count, seed=seed, **options)
                runs.append(write_run(root / f"{number}_{method}_w{count}_s{seed}", run))
                number += 1
    return runs


def _rows(run: SyntheticRun, density: float, rng: np.random.Generator):
    """The train rows, with an eval row at the end of each epoch."""
    per_epoch = max(1, run.steps // run.epochs)
    k_target = max(1, int(density * NUMEL))
    method = registry.method(run.method)
    whole = method.selects and not method.split  # each rank selects over the whole vector
    for step in range(run.steps):
        noise = rng.normal(0.0, 0.05)
        # Overlapping selections build up, varying with the step and the seed (so that a mean over
        # steps and a spread over seeds are not trivially right); split methods are 1 exactly.
        buildup = (1.0 + (run.workers - 1) * 0.5) * (1.0 + 0.05 * np.sin(step + 3.0 * run.seed)) if whole else 1.0
        actual = min(1.0, density * buildup * (1.0 + noise))
        compute, select = 20.0 + rng.random(), 0.1 * (1 + rng.random()) * (10 if whole else 10 / run.workers)
        sent = actual * NUMEL * 8.0
        step_ms = compute + select * 1.2 + 3.5
        row = {
            k.ROW_STEP: step, k.ROW_KIND: k.KIND_TRAIN, k.ROW_EPOCH: step // per_epoch,
            k.EXCHANGE_MODEL: 1.0 + actual * 50, k.DENSE_MODEL: 51.0,
            k.SENT_MAX: sent * 1.1, k.SENT_MEAN: sent, k.RECV_MAX: sent * 1.1, k.RECV_MEAN: sent,
            k.DENSE_BYTES: NUMEL * 8.0, k.RATIO: sent / (NUMEL * 8.0),
            k.DENSITY_ACTUAL: actual, k.DENSITY_TARGET: density, k.DENSITY_ERROR: actual * NUMEL / k_target - 1.0,
            k.BUILDUP: buildup, k.OVERLAP: 1.0, k.K_MAX: k_target * 1.2,
            k.K_MEAN: float(k_target), k.LOAD_IMBALANCE: abs(rng.normal(0.2, 0.05)),
            k.LOSS: 2.0 * np.exp(-step / run.steps) + 0.1 * rng.random(),
            k.SELECT_MAX: select * 1.2, k.SELECT_MEAN: select,
            k.COMPUTE_MAX: compute, k.COMPUTE_MEAN: compute * 0.95,
            k.EXCHANGE: 2.0 + rng.random(), k.STEP: step_ms,
            k.RESIDUAL: 0.0 if run.method == "dense" else 5.0 + rng.random(),
            k.REL_RESIDUAL: 0.0 if run.method == "dense" else 0.9,
        }
        if not run.legacy:
            row[k.LR] = 0.1
            row[k.ELAPSED] = (step + 1) * step_ms / 1e3
            # the union exchange's collectives as the runner logs them (experiments/engine/core/ledger.py)
            row[k.LEDGER] = f"all_gather:1:4 all_gather:{round(k_target * 1.2)}:4 all_reduce:{round(actual * NUMEL)}:4"
        row.update(_method_state(run, step, rng))
        yield row
        if (step + 1) % per_epoch == 0:
            progress = 1 - np.exp(-(step + 1) / per_epoch)
            evaluation = {k.ROW_STEP: step, k.ROW_KIND: k.KIND_EVAL, k.ROW_EPOCH: step // per_epoch,
                          **_evaluation(run.task, progress, rng)}
            if not run.legacy:
                evaluation[k.ELAPSED] = (step + 1) * step_ms / 1e3
            yield evaluation


def _evaluation(task: str, progress: float, rng: np.random.Generator) -> dict:
    """An eval row's metrics as the runner logs them for `task`; `progress` in (0, 1) improves them."""
    noise = 0.01 * rng.random()
    if task == "language_model":
        perplexity = 400.0 - 280.0 * progress + 5.0 * noise
        return {k.PERPLEXITY: perplexity, k.EVAL_LOSS: float(np.log(perplexity))}
    if task == "recommendation":
        hit_rate = 0.65 * progress + noise
        return {k.HR10: hit_rate, k.NDCG10: 0.6 * hit_rate}
    accuracy = 0.9 * progress + noise
    return {k.ACCURACY: accuracy, k.EVAL_LOSS: 1 - accuracy, k.TOP5: min(1.0, accuracy + 0.08)}


def _method_state(run: SyntheticRun, step: int, rng: np.random.Generator) -> dict:
    """What the method-specific sparsifiers log besides the common metrics, under their keys."""
    state: dict = {}
    if run.method in THRESHOLDED:
        state[k.THRESHOLD] = 0.01 * (1 + 0.1 * np.sin(step / 10))
    if run.method in SCANNING:
        state[k.SCANNED] = float(NUMEL // run.workers)
    if run.method == "exdyna":
        edges = np.linspace(0, 1024, run.workers + 1) + np.r_[0, rng.integers(-3, 4, run.workers - 1), 0]
        state[k.PARTITION_BOUNDARIES] = [int(edge) for edge in edges]
        state[k.BLOCKS_MOVED] = float(rng.integers(0, 4))
        state[k.BLOCK_SIZE] = float(NUMEL // 1024)
    if run.method == "sage" and step > 0:  # the rescaling factors exist from the second step on
        state.update({k.sparsifier_key(name): 1.0 + 0.01 * rng.normal() for name in ("alpha", "beta", "gamma")})
        state[k.sparsifier_key("d_exam")] = run.density * (1 + 0.1 * rng.normal())
    if run.method == "gaussiank":
        state[k.SCANS] = float(rng.integers(1, 4))
    if run.method == "sidco":
        state[k.STAGES] = 1.0
    if run.method == "accordion":  # every parameter at k_high after the first detection, at step 0
        state.update({k.ACCORDION_HIGH: float(UNITS), k.ACCORDION_DETECTIONS: 1.0})
        if step == 0:
            state.update({k.ACCORDION_PARAMETER_HIGH: [1.0] * UNITS, k.ACCORDION_PARAMETER_NORMS: [1.0] * UNITS})
    if run.method == "dgc":
        state.update({k.DGC_DENSITY: run.density, k.DGC_RETRIES: 0.0, k.DGC_CLIP_COEF: 1.0})
    if run.method == "deft":
        norms = rng.random(UNITS) * 2
        unit_k = [float(count) for count in np.maximum(1, np.floor(norms / norms.sum() * 1000))]
        loads = [float(v) for v in 100 + rng.random(run.workers)]
        state.update({
            k.DEFT_MAX_BIN_LOAD_RATIO: max(loads) / (sum(loads) / run.workers), k.DEFT_K_SUM: sum(unit_k),
            k.DEFT_COMMON_UNITS: 1.0, k.DEFT_UNIT_K: unit_k, k.DEFT_UNIT_COMMON: [0.0] * (UNITS - 1) + [1.0],
            k.DEFT_UNIT_NORMS: [float(n) for n in norms], k.DEFT_BIN_LOADS: loads,
        })
    return state
