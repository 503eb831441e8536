"""A learnable synthetic task generated from a seed: each class is a random prototype image,
samples are prototypes plus Gaussian noise. Any size, no files, fully repeatable."""
from __future__ import annotations

import torch

from datasets.base import DatasetSplits


def load(
    num_train: int = 2048,
    num_test: int = 512,
    num_classes: int = 10,
    channels: int = 1,
    image_size: int = 8,
    noise: float = 1.0,
    seed: int = 0,
) -> DatasetSplits:
    """Generates the task; `noise` sets how hard it is (1.0: a small CNN reaches ~90%)."""
    generator = torch.Generator().manual_seed(seed)
    shape = (channels, image_size, image_size)
    prototypes = torch.randn((num_classes, *shape), generator=generator)

    def sample(count: int) -> tuple[torch.Tensor, torch.Tensor]:
        labels = torch.randint(num_classes, (count,), generator=generator)
        inputs = prototypes[labels] + noise * torch.randn((count, *shape), generator=generator)
        return inputs, labels

    train_x, train_y = sample(num_train)
    test_x, test_y = sample(num_test)
    return DatasetSplits("synthetic", train_x, train_y, test_x, test_y, num_classes)
