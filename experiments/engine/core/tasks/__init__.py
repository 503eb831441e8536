"""Tasks: how a rank turns its data into batches and a loss, and how rank 0 evaluates.

The training step is the same for every workload (experiments/engine/core/step.py); what differs is here:

| task             | data (datasets/base.py) | batches per rank                          | loss          | headline metric          |
|------------------|-------------------------|-------------------------------------------|---------------|--------------------------|
| classification   | DatasetSplits           | a DistributedSampler shard, augmented     | cross-entropy | eval/accuracy (higher)   |
| language_model   | TokenStreams            | the rank's own columns, BPTT windows      | cross-entropy | eval/perplexity (lower)  |
| recommendation   | Interactions            | a shard of positives + sampled negatives  | BCE (logits)  | eval/hr10 (higher)       |

A rank's batches depend only on (seed, rank, epoch), never on which process hosts the rank, so
hosted ranks see exactly what the same rank sees in its own process. State a rank keeps between
steps (the LSTM's hidden state) lives in the replica's `task_state` dict, one per hosted rank.
"""
from __future__ import annotations

from typing import Any, Iterator, Protocol

import torch

from datasets.base import DatasetSplits, Interactions, TaskData, TokenStreams
from experiments.runformat.headline import task_metric


class Batches(Protocol):
    """One rank's batches: the same number of steps per epoch on every rank (collectives must
    match), reshuffled or resampled per epoch from (seed, rank, epoch)."""

    steps_per_epoch: int
    examples: int  # what one epoch of this rank covers (for error messages)

    def epoch(self, epoch: int) -> Iterator[Any]: ...


class Task(Protocol):
    kind: str
    metric: str  # the headline eval key; which way is better is the registry's (experiments/runformat/headline.py)

    def shard(self, rank: int, world_size: int, batch_size: int, seed: int, device: torch.device) -> Batches: ...

    def loss(self, model: torch.nn.Module, batch: Any, state: dict[str, Any]) -> torch.Tensor: ...

    def start_epoch(self, state: dict[str, Any]) -> None: ...

    def evaluate(self, model: torch.nn.Module, device: torch.device, limit: int | None = None) -> dict[str, float]:
        """The task's eval/* metrics on its test split (its first `limit` examples if given)."""


def make_task(data: TaskData) -> Task:
    """The task that trains on `data` (dispatch on the container's kind)."""
    from experiments.engine.core.tasks.classification import ClassificationTask
    from experiments.engine.core.tasks.language_model import LanguageModelTask
    from experiments.engine.core.tasks.recommendation import RecommendationTask

    if isinstance(data, DatasetSplits):
        return ClassificationTask(data)
    if isinstance(data, TokenStreams):
        return LanguageModelTask(data)
    if isinstance(data, Interactions):
        return RecommendationTask(data)
    raise TypeError(f"no task for data of type {type(data).__name__}")


def describe_task(task: Task) -> dict[str, Any]:
    """What summary.json records, so that reports pick each run's own headline metric."""
    return {"kind": task.kind, "metric": task.metric, "higher_is_better": task_metric(task.metric).higher_is_better}
