"""One logical rank hosted by this process: its sparsifier, its residual, its data shard and
its BatchNorm buffers. Parameters are shared: synchronous data parallelism keeps them equal."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch

from experiments.data import ShardBatches
from sparsifiers.base import Sparsifier


@dataclass
class Replica:
    rank: int
    sparsifier: Sparsifier
    residual: torch.Tensor  # error feedback; holds acc = grad + residual during a step
    batches: ShardBatches
    buffers: list[torch.Tensor] | None  # own copies of the model's buffers when ranks share a model

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


def make_replicas(
    model: torch.nn.Module,
    flat: torch.Tensor,
    sparsifiers: list[Sparsifier],
    shards: list[ShardBatches],
    ranks: list[int],
) -> list[Replica]:
    """One replica per hosted rank; buffers are copied only when several ranks share the model."""
    share = len(ranks) > 1
    return [
        Replica(
            rank=rank,
            sparsifier=sparsifier,
            residual=torch.zeros_like(flat),
            batches=shard,
            buffers=[b.detach().clone() for b in model.buffers()] if share else None,
        )
        for rank, sparsifier, shard in zip(ranks, sparsifiers, shards)
    ]
