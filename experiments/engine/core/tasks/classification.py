"""Image classification: each rank's shard as in-memory batches, augmented; accuracy at eval.

DistributedSampler decides the shard (num_replicas = W, rank = the logical rank), so a hosted
rank sees exactly the batches the same rank would see as its own process. Every rank does the
same number of steps per epoch (collectives must match): the sampler pads shards to equal
length, and a last partial batch is dropped.

Augmentation (CIFAR's RandomCrop(32, padding=4) and horizontal flip) is drawn per batch from a
generator seeded by (seed, rank, epoch): repeatable, and independent of the hosting process.
"""
from __future__ import annotations

from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch.utils.data.distributed import DistributedSampler

from datasets.base import Augmentation, DatasetSplits

from experiments.runformat import metric_keys as keys

# Streams of the per-rank augmentation generator are offset from the run seed by this much per
# rank, so that no two ranks (and no rank and the model init) share a stream.
RANK_STREAM = 1_000_003


def augment(images: torch.Tensor, augmentation: Augmentation, generator: torch.Generator) -> torch.Tensor:
    """RandomCrop(H, padding) with per-channel fill, then a horizontal flip with p = 1/2, as
    torchvision's transforms do to each image, for a whole batch (N x C x H x W)."""
    count, channels, height, width = images.shape
    pad = augmentation.padding
    if pad:
        fill = torch.tensor(augmentation.pad_value or [0.0] * channels, dtype=images.dtype)
        padded = fill.view(1, channels, 1, 1).expand(count, channels, height + 2 * pad, width + 2 * pad).clone()
        padded[:, :, pad : pad + height, pad : pad + width] = images
        offsets = torch.randint(0, 2 * pad + 1, (count, 2), generator=generator)
        images = torch.stack([
            padded[i, :, top : top + height, left : left + width] for i, (top, left) in enumerate(offsets.tolist())
        ])
    if augmentation.flip:
        flip = torch.rand(count, generator=generator) < 0.5
        images = torch.where(flip.view(count, 1, 1, 1), images.flip(-1), images)
    return images


class ShardBatches:
    """Batches of one logical rank's shard; `epoch(e)` reshuffles as DistributedSampler does."""

    def __init__(
        self,
        inputs: torch.Tensor,
        labels: torch.Tensor,
        rank: int,
        world_size: int,
        batch_size: int,
        seed: int,
        augmentation: Augmentation | None = None,
    ) -> None:
        self.inputs, self.labels = inputs, labels
        self.batch_size = batch_size
        self.rank, self.seed = rank, seed
        self.augmentation = augmentation
        self.sampler = DistributedSampler(
            range(len(labels)), num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=False
        )

    @property
    def steps_per_epoch(self) -> int:
        return len(self.sampler) // self.batch_size

    @property
    def examples(self) -> int:
        return len(self.sampler)

    def epoch(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.sampler.set_epoch(epoch)
        order = torch.tensor(list(iter(self.sampler)), dtype=torch.int64)
        generator = torch.Generator().manual_seed(self.seed + RANK_STREAM * (self.rank + 1) + epoch)
        for step in range(self.steps_per_epoch):
            batch = order[step * self.batch_size : (step + 1) * self.batch_size]
            inputs = self.inputs[batch]
            if self.augmentation is not None:
                inputs = augment(inputs, self.augmentation, generator)
            yield inputs, self.labels[batch]


class ClassificationTask:
    kind = "classification"
    metric = keys.ACCURACY

    def __init__(self, data: DatasetSplits) -> None:
        self.data = data
        self.loss_fn = torch.nn.CrossEntropyLoss()

    def shard(self, rank: int, world_size: int, batch_size: int, seed: int, device: torch.device) -> ShardBatches:
        # Augmentation runs on the CPU copy (cheap per batch); inputs move to the device per batch.
        return ShardBatches(self.data.train_x, self.data.train_y, rank, world_size, batch_size, seed, self.data.augmentation)

    def start_epoch(self, state: dict[str, Any]) -> None:
        """Nothing carries over between batches."""

    def loss(self, model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor], state: dict[str, Any]) -> torch.Tensor:
        inputs, labels = batch
        device = next(model.parameters()).device
        return self.loss_fn(model(inputs.to(device)), labels.to(device))

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, device: torch.device, limit: int | None = None) -> dict[str, float]:
        """Top-1 accuracy (and top-5 where there are more than 5 classes) and loss on the test
        split (its first `limit` images if given)."""
        data, batch_size = self.data, self.data.test_batch_size
        count = len(data.test_y) if limit is None else min(limit, len(data.test_y))
        correct, top5, loss_sum = 0, 0, 0.0
        for start in range(0, count, batch_size):
            end = min(start + batch_size, count)
            inputs = data.test_x[start:end].to(device)
            labels = data.test_y[start:end].to(device)
            logits = model(inputs)
            loss_sum += float(F.cross_entropy(logits, labels, reduction="sum"))
            correct += int((logits.argmax(dim=1) == labels).sum())
            if data.num_classes > 5:
                top5 += int((logits.topk(5, dim=1).indices == labels[:, None]).any(dim=1).sum())
        result = {keys.ACCURACY: correct / count, keys.EVAL_LOSS: loss_sum / count}
        if data.num_classes > 5:
            result[keys.TOP5] = top5 / count
        return result
