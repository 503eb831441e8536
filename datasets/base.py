"""What every dataset loader returns: in-memory tensors, small enough for a laptop."""
from __future__ import annotations

from dataclasses import dataclass

import torch


class DatasetNotFound(FileNotFoundError):
    """The data is not on this machine; the message says how to get it."""


@dataclass
class DatasetSplits:
    """Train and test tensors of a classification task (inputs N x C x H x W, float32)."""

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train_x.shape[1:])


def standardize(train_x: torch.Tensor, test_x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Scales both splits by the training split's mean and standard deviation."""
    mean, std = train_x.mean(), train_x.std()
    return (train_x - mean) / std, (test_x - mean) / std
