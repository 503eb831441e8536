"""Synthetic run directories in the local store's format, for the load benchmark and the tests.

The numbers are plausible, not simulated: densities drift around their target, threshold methods
log a threshold, ExDyna logs partition boundaries and DEFT its per-unit lists, so that every
figure has something to draw. Each run has a task (classification, language_model,
recommendation) whose eval rows carry that task's metrics, and summary.json records the task and
the data source under the runner's keys (`task`, `dataset`, `schedule`); `legacy` writes a run as
the runner did before tasks existed. Nothing here is used to analyse real runs.
"""
from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

NUMEL = 100_000
UNITS = 12
# task kind -> (headline metric, higher is better, default model, default dataset)
TASKS = {
    "classification": ("eval/accuracy", True, "mlp", "synthetic"),
    "language_model": ("eval/perplexity", False, "lstm", "wikitext2"),
    "recommendation": ("eval/hr10", True, "ncf", "movielens"),
}


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
    lines = [json.dumps(row) for row in _rows(run, density, rng)]
    text = "\n".join(lines) + "\n"
    return text + lines[0][: len(lines[0]) // 2] if run.cut else text


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
    }
    if not run.legacy:
        config["schedule"] = {"name": "constant"}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    env = {"resolved": {"world": "hosted", "processes": processes}, "job": {"group": run.group}}
    (run_dir / "env.json").write_text(json.dumps(env))
    metrics = metrics if metrics is not None else metrics_text(run)
    (run_dir / "metrics.jsonl").write_text(metrics)
    status: dict = {"status": run.status}
    if run.status == "failed":
        status["error"] = "rank0: RuntimeError: synthetic failure"
    (run_dir / "status.json").write_text(json.dumps(status))
    if run.status == "done":
        (run_dir / "summary.json").write_text(json.dumps(_summary(run, metrics)))
    return run_dir


def _summary(run: SyntheticRun, metrics: str) -> dict:
    """summary.json: the last evaluation's metrics and, unless legacy, task, dataset and schedule."""
    # From the end: the benchmark writes 1,000 runs of 1,000 steps, too many lines to parse each.
    last_eval = next((json.loads(line) for line in reversed(metrics.splitlines()) if '"kind": "eval"' in line), {})
    summary = {key: value for key, value in last_eval.items() if key.startswith("eval/")}
    summary["steps"] = run.steps
    if run.legacy:
        return summary
    metric, higher_is_better, _, _ = TASKS[run.task]
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
    whole = run.method in ("topk", "threshold", "dgc", "sage", "gaussiank", "randomk")
    for step in range(run.steps):
        noise = rng.normal(0.0, 0.05)
        buildup = 1.0 + (run.workers - 1) * 0.5 if whole else 1.0
        actual = min(1.0, density * buildup * (1.0 + noise))
        compute, select = 20.0 + rng.random(), 0.1 * (1 + rng.random()) * (10 if whole else 10 / run.workers)
        sent = actual * NUMEL * 8.0
        row = {
            "step": step, "kind": "train", "epoch": step // per_epoch,
            "traffic/sent_bytes_max": sent * 1.1, "traffic/sent_bytes_mean": sent,
            "traffic/recv_bytes_max": sent * 1.1, "traffic/recv_bytes_mean": sent,
            "traffic/dense_bytes": NUMEL * 8.0, "traffic/ratio": sent / (NUMEL * 8.0),
            "density/actual": actual, "density/target": density, "density/error": actual * NUMEL / k_target - 1.0,
            "buildup": buildup, "selection/overlap": 1.0, "selection/k_max": k_target * 1.2,
            "selection/k_mean": float(k_target), "selection/load_imbalance": abs(rng.normal(0.2, 0.05)),
            "train/loss": 2.0 * np.exp(-step / run.steps) + 0.1 * rng.random(),
            "time/select_ms_max": select * 1.2, "time/select_ms_mean": select,
            "time/compute_ms_max": compute, "time/compute_ms_mean": compute * 0.95,
            "time/exchange_ms": 2.0 + rng.random(), "time/exchange_model_ms": 1.0 + actual * 50,
            "time/step_ms": compute + select * 1.2 + 3.5,
            "ef/residual_norm": 0.0 if run.method == "dense" else 5.0 + rng.random(),
            "ef/rel_residual": 0.0 if run.method == "dense" else 0.9,
        }
        if not run.legacy:
            row["train/lr"] = 0.1
        row.update(_method_state(run, step, rng))
        yield row
        if (step + 1) % per_epoch == 0:
            progress = 1 - np.exp(-(step + 1) / per_epoch)
            yield {"step": step, "kind": "eval", "epoch": step // per_epoch, **_evaluation(run.task, progress, rng)}


def _evaluation(task: str, progress: float, rng: np.random.Generator) -> dict:
    """An eval row's metrics as the runner logs them for `task`; `progress` in (0, 1) improves them."""
    noise = 0.01 * rng.random()
    if task == "language_model":
        perplexity = 400.0 - 280.0 * progress + 5.0 * noise
        return {"eval/perplexity": perplexity, "eval/loss": float(np.log(perplexity))}
    if task == "recommendation":
        hit_rate = 0.65 * progress + noise
        return {"eval/hr10": hit_rate, "eval/ndcg10": 0.6 * hit_rate}
    accuracy = 0.9 * progress + noise
    return {"eval/accuracy": accuracy, "eval/loss": 1 - accuracy, "eval/top5": min(1.0, accuracy + 0.08)}


def _method_state(run: SyntheticRun, step: int, rng: np.random.Generator) -> dict:
    """What the method-specific sparsifiers log besides the common metrics."""
    state: dict = {}
    if run.method in ("micro", "exdyna", "threshold", "sage", "dgc"):
        state["sparsifier/threshold"] = 0.01 * (1 + 0.1 * np.sin(step / 10))
    if run.method == "exdyna":
        edges = np.linspace(0, 1024, run.workers + 1) + np.r_[0, rng.integers(-3, 4, run.workers - 1), 0]
        state["sparsifier/partition_boundaries"] = [int(edge) for edge in edges]
    if run.method == "deft":
        norms = rng.random(UNITS) * 2
        state["sparsifier/unit_norms"] = [float(n) for n in norms]
        state["sparsifier/unit_k"] = [int(k) for k in np.maximum(1, norms / norms.sum() * 1000)]
        state["sparsifier/bin_loads"] = [float(v) for v in 100 + rng.random(run.workers)]
    return state
