"""One run's description as a flat row: key config columns, the whole config flattened as
`cfg.<dotted.key>`, status, the run's task and data source (analysis.tasks), and the scalar
numbers of summary.json.

The same function describes a local run directory and a W&B run, so both load into one table.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analysis.tasks import describe_task
from experiments.runformat import metric_keys as keys
from experiments.runformat import run_dir as files
from experiments.runformat.divergence import describe as describe_divergence
from experiments.runformat.runtime import processes_of, recorded_world

# What of env.json can change a run's numbers while its config stays the same: the machine's
# kernels and math libraries (docs/reproducibility.md). `env.<name>` columns; the report shows
# them as settings when runs differ in them (analysis.settings).
# The device a run computed on (`resolved`: cpu or cuda; device=auto decides by the GPU count)
# and the GPU's identity keep CUDA runs apart from CPU runs and one GPU model from another.
PROVENANCE = {
    "cpu_model": ("device", "cpu_model"),
    "cpu_capability": ("device", "cpu_capability"),
    "blas": ("device", "blas"),
    "blas_version": ("device", "blas_version"),
    "onednn": ("device", "onednn"),
    "gpus": ("device", "gpus"),
    "torch": ("versions", "torch"),
    "device": ("resolved", "device"),
    "gpu": ("device", "gpu", "name"),
    "gpu_capability": ("device", "gpu", "capability"),
    "gpu_driver": ("device", "gpu", "driver"),
    "cuda": ("device", "gpu", "cuda"),
    "cudnn": ("device", "gpu", "cudnn"),
}
PROVENANCE_PREFIX = "env."

# Summary entries that repeat the config or env; the config is the authority for them.
_SUMMARY_SKIPPED = {"workers", "processes", "world", "sparsifier", "optimizer", "wandb_mode"}


def flatten(mapping: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"optimizer": {"lr": 0.1}} -> {"optimizer.lr": 0.1}; lists become strings (one cell each);
    Hydra's `_target_`/`_partial_` plumbing is left out."""
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        if str(key).startswith("_"):
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        elif isinstance(value, (list, tuple)):
            flat[name] = json.dumps(value)
        else:
            flat[name] = value
    return flat


def describe_run(
    run_id: str,
    run_dir: str,
    config: dict[str, Any] | None,
    env: dict[str, Any] | None,
    status: dict[str, Any] | None,
    summary: dict[str, Any] | None,
) -> dict[str, Any]:
    """The runs-table row of one run; absent files leave their columns empty, never fail."""
    config, env, status, summary = config or {}, env or {}, status or {}, summary or {}
    resolved = env.get("resolved") or {}
    sparsifier = config.get("sparsifier") or {}
    workers = config.get("workers", summary.get("workers"))
    processes = resolved.get("processes", summary.get("processes", processes_of(config.get("processes"), workers)))
    row: dict[str, Any] = {
        "run_id": run_id,
        "run_dir": run_dir,
        "name": (env.get("job") or {}).get("name") or Path(run_dir).name,
        "sparsifier": sparsifier.get("name") or (summary.get("sparsifier") or {}).get("name"),
        "density": sparsifier.get("density"),
        "workers": workers,
        "processes": processes,
        "world": recorded_world(workers, processes, resolved, summary),
        "model": (config.get("model") or {}).get("name"),
        "dataset": (config.get("dataset") or {}).get("name") or (summary.get("dataset") or {}).get("name"),
        "seed": config.get("seed"),
        "group": (env.get("job") or {}).get("group") or Path(run_dir).parent.name,
        "status": status.get("status", "missing"),
        "error": status.get("error"),
        "warmup_steps": config.get("warmup_steps", 0),
        "log_every": (config.get("logger") or {}).get("log_every"),
        "scope": (summary.get("sparsifier") or {}).get("scope"),
        "commit": (env.get("git") or {}).get("commit"),
        "started": status.get("started"),
        "ended": status.get("ended"),
        **describe_task(summary),
        # summary.json's divergence in words ("" for a run that did not diverge); None when the run
        # recorded none (older runs, unfinished ones): analysis.divergence applies the rule then.
        "diverged": describe_divergence(summary[keys.DIVERGED]) if keys.DIVERGED in summary else None,
    }
    row.update({f"cfg.{key}": value for key, value in flatten(config).items()})
    row.update(provenance(env))
    for key, value in summary.items():
        if key not in _SUMMARY_SKIPPED and key not in row and isinstance(value, (int, float, str, type(None))):
            row[key] = value
    return row


def provenance(env: dict[str, Any]) -> dict[str, Any]:
    """The `env.*` columns of one run (None where env.json, or an older one, lacks the entry)."""
    columns = {}
    for name, path in PROVENANCE.items():
        value: Any = env
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        columns[PROVENANCE_PREFIX + name] = json.dumps(value) if isinstance(value, list) else value
    return columns


def read_run_info(run_dir: Path) -> dict[str, Any]:
    """describe_run for a local run directory; run_id is its absolute path."""
    return describe_run(
        run_id=str(run_dir),
        run_dir=str(run_dir),
        config=files.try_read_yaml(run_dir / files.CONFIG),
        env=files.try_read_json(run_dir / files.ENV),
        status=files.try_read_json(run_dir / files.STATUS),
        summary=files.try_read_json(run_dir / files.SUMMARY),
    )
