"""Each rank's shard of the training data, as batches of in-memory tensors.

DistributedSampler decides the shard (num_replicas = W, rank = the logical rank), so a hosted
rank sees exactly the batches the same rank would see as its own process. Every rank does the
same number of steps per epoch (collectives must match): the sampler pads shards to equal
length, and a last partial batch is dropped.
"""
from __future__ import annotations

from typing import Iterator

import torch
from torch.utils.data.distributed import DistributedSampler


class ShardBatches:
    """Batches of one logical rank's shard; `epoch(e)` reshuffles as DistributedSampler does."""

    def __init__(self, inputs: torch.Tensor, labels: torch.Tensor, rank: int, world_size: int, batch_size: int, seed: int) -> None:
        self.inputs, self.labels = inputs, labels
        self.batch_size = batch_size
        self.sampler = DistributedSampler(
            range(len(labels)), num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=False
        )

    @property
    def steps_per_epoch(self) -> int:
        return len(self.sampler) // self.batch_size

    def epoch(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.sampler.set_epoch(epoch)
        order = torch.tensor(list(iter(self.sampler)), dtype=torch.int64)
        for step in range(self.steps_per_epoch):
            batch = order[step * self.batch_size : (step + 1) * self.batch_size]
            yield self.inputs[batch], self.labels[batch]
