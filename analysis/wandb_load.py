"""A W&B project -> the same tidy tables as local run directories (analysis.tables).

Optional: wandb is imported only when this is called, and never needed for local runs. The W&B
sink mirrors scalars only, so list-valued method state (partition boundaries, DEFT's lists) is
found in the local metrics.jsonl, not here. W&B merges rows logged at the same step, so a train
row and the epoch's eval row can arrive as one history row; they are split apart again here.

    from analysis.wandb_load import load_wandb
    tables = load_wandb("my-entity/sparsebench", filters={"group": "2026-11-29_17-49-22"})
"""
from __future__ import annotations

from typing import Any

from analysis.metrics_io import records_to_table
from analysis.runinfo import describe_run
from analysis.tables import RunTables, assemble
from experiments.runformat import metric_keys as k

# W&B run states -> the local store's statuses.
STATES = {"finished": "done", "running": "running", "pending": "running", "crashed": "failed",
          "failed": "failed", "killed": "failed", "preempted": "failed"}


def load_wandb(path: str, filters: dict[str, Any] | None = None, api: Any = None) -> RunTables:
    """Every run of the W&B project `path` ("entity/project") matching `filters` (W&B's
    MongoDB-style run filters). `api` defaults to wandb.Api(); tests pass a stand-in."""
    if api is None:
        import wandb  # lazy: slow to import, and only needed here

        api = wandb.Api()
    infos, train, evals = [], [], []
    for run in api.runs(path, filters=filters or {}):
        config = dict(run.config)
        env = {"resolved": config.pop("resolved", {}) or {}, "device": config.pop("machine", {}) or {},
               "versions": config.pop("versions", {}) or {}, "job": {"group": run.group, "name": run.name}}
        summary = {key: value for key, value in dict(run.summary).items() if not str(key).startswith("_")}
        run_id = "wandb:" + "/".join(run.path)
        info = describe_run(run_id, run.url, config, env, {"status": STATES.get(run.state, run.state)}, summary)
        info.update(metrics_cut=False, bad_lines=0)
        train_rows, eval_rows = split_history(run.scan_history())
        infos.append(info)
        train.append(records_to_table(train_rows) if train_rows else None)
        evals.append(records_to_table(eval_rows) if eval_rows else None)
    return assemble(infos, train, evals)


def split_history(history: Any) -> tuple[list[dict], list[dict]]:
    """W&B history rows -> (train rows, eval rows) in the local store's shape (`step`, no `_*`)."""
    train, evals = [], []
    for row in history:
        step = row.get("_step")
        values = {key: value for key, value in row.items() if not str(key).startswith("_") and value is not None}
        evaluation = {key: value for key, value in values.items() if str(key).startswith(k.EVAL_PREFIX)}
        rest = {key: value for key, value in values.items() if key not in evaluation}
        if evaluation:
            evals.append({k.ROW_STEP: step, k.ROW_KIND: k.KIND_EVAL, k.ROW_EPOCH: values.get(k.ROW_EPOCH), **evaluation})
        if set(rest) - {k.ROW_EPOCH}:
            train.append({k.ROW_STEP: step, k.ROW_KIND: k.KIND_TRAIN, **rest})
    return train, evals
