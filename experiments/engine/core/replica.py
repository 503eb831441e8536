"""One logical rank hosted by this process, the model's side of it: its data shard, its BatchNorm
buffers and its task state (the LSTM's hidden state). Parameters are shared: synchronous data
parallelism keeps them equal. Its sparsifier and residual are the step's (hosted.py, HostedRanks)."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from experiments.engine.core.tasks import Batches


@dataclass
class Replica:
    rank: int
    batches: Batches
    buffers: list[torch.Tensor] | None  # own copies of the model's buffers when ranks share a model
    task_state: dict[str, Any] = field(default_factory=dict)  # what the task carries between steps

    @contextmanager
    def own_buffers(self, model: torch.nn.Module) -> Iterator[None]:
        """Runs the model with this rank's buffers (BatchNorm statistics) and keeps the updates."""
        if self.buffers is None:
            yield
            return
        shared = list(model.buffers())
        for mine, theirs in zip(self.buffers, shared):
            theirs.copy_(mine)
        try:
            yield
        finally:
            for mine, theirs in zip(self.buffers, shared):
                mine.copy_(theirs)

    def load_state(self, buffers: list[torch.Tensor] | None, task_state: dict[str, Any]) -> None:
        """Puts back this rank's saved state, in place (a checkpoint, or a skipped step's start)."""
        if self.buffers is not None:
            for mine, saved in zip(self.buffers, buffers, strict=True):
                mine.copy_(saved)
        self.task_state.clear()
        self.task_state.update(task_state)


def make_replicas(model: torch.nn.Module, shards: list[Batches], ranks: list[int]) -> list[Replica]:
    """One replica per hosted rank; buffers are copied only when several ranks share the model."""
    share = len(ranks) > 1
    return [
        Replica(rank=rank, batches=shard, buffers=[b.detach().clone() for b in model.buffers()] if share else None)
        for rank, shard in zip(ranks, shards)
    ]
