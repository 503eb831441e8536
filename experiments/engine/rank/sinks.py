"""Metric sinks: where each logged row goes. Rank 0 logs; other ranks get a NullSink.

A sink has `log(record, step)` and `close(failed)`. The local JSONL sink always works; the W&B
sink is imported lazily so that runs without W&B never pay its start-up.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from experiments.runformat.run_dir import WANDB_DIR, MetricsWriter
from experiments.engine.rank.wandb_failure import note_run


class Sink(Protocol):
    def log(self, record: dict[str, Any], step: int) -> None: ...

    def close(self, failed: bool = False) -> None: ...


class NullSink:
    """For ranks that do not log."""

    def log(self, record: dict[str, Any], step: int) -> None:
        pass

    def close(self, failed: bool = False) -> None:
        pass


class JsonlSink:
    """metrics.jsonl in the run directory: the store every analysis reads."""

    def __init__(self, writer: MetricsWriter) -> None:
        self.writer = writer

    def log(self, record: dict[str, Any], step: int) -> None:
        self.writer.write({"step": step, **record})

    def close(self, failed: bool = False) -> None:
        self.writer.close()


class WandbSink:
    """Mirrors the rows into one W&B run per job (offline by default, grouped by sweep)."""

    def __init__(
        self,
        run_dir: Path,
        mode: str,
        project: str,
        entity: str | None,
        name: str,
        group: str,
        config: dict[str, Any],
        tags: list[str],
        run_id: str | None = None,
    ) -> None:
        import wandb  # lazy: slow to import, and not needed when disabled

        # Everything W&B writes stays in the run directory, never in $HOME.
        for variable in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
            os.environ.setdefault(variable, str(run_dir / WANDB_DIR))
        (run_dir / WANDB_DIR).mkdir(exist_ok=True)
        self._run = wandb.init(
            project=project,
            entity=entity,
            name=name,
            group=group,
            dir=str(run_dir),
            mode=mode,
            config=config,
            tags=tags,
            reinit="finish_previous",
            # The run directory's own id: a resumed run (resume=DIR, a torchrun restart) continues
            # the same W&B run instead of starting another.
            id=run_id,
            resume="allow" if run_id else None,
        )
        # run.py finishes this run as failed if this process dies before close (wandb_failure.py).
        self._run_dir, self._mode = run_dir, mode
        note_run(run_dir, self._run, mode)

    def log(self, record: dict[str, Any], step: int) -> None:
        # Scalars only: per-unit lists stay in metrics.jsonl, where the analysis reads them.
        self._run.log({k: v for k, v in record.items() if isinstance(v, (int, float))}, step=step)

    def close(self, failed: bool = False) -> None:
        self._run.finish(exit_code=1 if failed else 0)
        note_run(self._run_dir, self._run, self._mode, closed=True)


class MultiSink:
    """Sends every row to several sinks."""

    def __init__(self, sinks: list[Sink]) -> None:
        self.sinks = sinks

    def log(self, record: dict[str, Any], step: int) -> None:
        for sink in self.sinks:
            sink.log(record, step)

    def close(self, failed: bool = False) -> None:
        for sink in self.sinks:
            sink.close(failed)
