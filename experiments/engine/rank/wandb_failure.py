"""A failed run's W&B record is valid and says why it failed, even when rank 0 was killed.

Rank 0 keeps the W&B run (sinks.WandbSink) and writes wandb_run.json beside it: the run's id,
mode and names, and `closed: true` once it finished the run itself. A rank killed by a signal
never finishes it: its offline file holds W&B's 7-byte header and nothing else (the rows sit
in the W&B service's buffer, which dies with it). So run.py, which outlives its ranks, records
the failure afterwards: it resumes the same run id (`resume="allow"`; offline, W&B writes a
second offline directory for the same run, and `wandb sync` of both makes one run), writes the
logged rows from metrics.jsonl (and the config) again if rank 0 could not close its own record, sets
`summary["failure"]` (the cause, as in status.json) and finishes it with exit code 1.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from experiments.runformat.run_dir import CONFIG, METRICS, WANDB_DIR, WANDB_RUN, read_metrics, write_atomic


def note_run(run_dir: Path, run: Any, mode: str, closed: bool = False) -> None:
    """Rank 0's note of its W&B run, rewritten with closed=True once it finished it."""
    record = {"id": run.id, "mode": mode, "project": run.project, "name": run.name, "group": run.group,
              "closed": closed}
    write_atomic(run_dir / WANDB_RUN, json.dumps(record) + "\n")


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """What W&B gets of a metrics row: scalars only (per-unit lists stay in metrics.jsonl)."""
    return {key: value for key, value in record.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "step"}


def record_failure(run_dir: Path, failure: dict[str, Any]) -> bool:
    """Finishes the run's W&B record as failed, with `failure` in its summary. Returns whether
    there was a W&B run to finish (none when W&B is disabled or rank 0 never started one)."""
    try:
        note = json.loads((run_dir / WANDB_RUN).read_text())
    except (OSError, ValueError):
        return False
    import wandb  # lazy: only a failed run with W&B pays for it

    for variable in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        os.environ.setdefault(variable, str(run_dir / WANDB_DIR))
    os.environ.setdefault("WANDB_SILENT", "true")
    config = None
    if not note.get("closed") and (run_dir / CONFIG).exists():  # its config was lost with the rest
        config = OmegaConf.to_container(OmegaConf.load(run_dir / CONFIG))
    run = wandb.init(id=note["id"], resume="allow", mode=note["mode"], project=note["project"], name=note["name"],
                     group=note["group"], dir=str(run_dir), config=config, reinit="finish_previous")
    if not note.get("closed") and (run_dir / METRICS).exists():
        for row in read_metrics(run_dir / METRICS):
            run.log(scalars(row), step=int(row["step"]))
    run.summary["failure"] = failure.get("error")
    run.summary["failure_cause"] = failure.get("cause")
    run.finish(exit_code=1)
    return True
