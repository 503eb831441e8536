"""What dataset loaders return: in-memory tensors of one of three task kinds.

A loader builds one of these containers; the rank process turns it into per-rank batches, a loss
and an evaluation (experiments/engine/core/tasks/). `model_inputs()` is what the model's constructor receives
from the data (shapes, class, vocabulary, user and item counts), so a config never repeats them.
`source` says where the data came from: `real` (the dataset's own files) or `stand-in: ...` (data
of the same shapes when the real files are absent and the config allows it, e.g. smoke runs);
runs record it, and figures show it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

REAL = "real"


class DatasetNotFound(FileNotFoundError):
    """The data is not on this machine; the message says how to get it."""


class DatasetCorrupt(ValueError):
    """A dataset file is there but unreadable (truncated, wrong format); the message names it."""


@dataclass
class Augmentation:
    """Per-batch training augmentation of images: RandomCrop(size, padding) with the padding
    filled by `pad_value` (per channel, in normalised units: the normalised black of
    torchvision's zero padding), then a horizontal flip with probability 1/2."""

    padding: int = 4
    pad_value: tuple[float, ...] = ()
    flip: bool = True


@dataclass
class DatasetSplits:
    """Image classification: inputs N x C x H x W float32 (normalised), labels int64."""

    kind: ClassVar[str] = "classification"
    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    source: str = REAL
    augmentation: Augmentation | None = None
    test_batch_size: int = 1024

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train_x.shape[1:])

    def model_inputs(self) -> dict[str, Any]:
        return {"input_shape": self.input_shape, "num_classes": self.num_classes}

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "task": self.kind, "source": self.source, "train": len(self.train_y), "test": len(self.test_y)}


@dataclass
class TokenStreams:
    """Language modelling: token ids of the train, validation and test text as 1-D int64 streams
    (an end-of-sentence token closes every line), and the vocabulary (`itos[id]`)."""

    kind: ClassVar[str] = "language_model"
    name: str
    train: torch.Tensor
    valid: torch.Tensor
    test: torch.Tensor
    itos: list[str]
    source: str = REAL
    bptt: int = 30  # tokens per truncated back-propagation window
    eval_batch_size: int = 10  # columns of the evaluation stream

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def model_inputs(self) -> dict[str, Any]:
        return {"vocab_size": self.vocab_size}

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name, "task": self.kind, "source": self.source, "vocab": self.vocab_size,
            "train_tokens": int(self.train.numel()), "valid_tokens": int(self.valid.numel()), "test_tokens": int(self.test.numel()),
        }


@dataclass
class Interactions:
    """Implicit-feedback recommendation (NCF): training positives (user, item), and per test
    user one held-out positive (leave-one-out: the latest interaction) with `eval_negatives`
    items the user never interacted with; HR@`top_k` ranks the positive among them.
    Users and items are dense ids 0..num_users-1, 0..num_items-1."""

    kind: ClassVar[str] = "recommendation"
    name: str
    num_users: int
    num_items: int
    train_users: torch.Tensor  # int64 [P]
    train_items: torch.Tensor  # int64 [P]
    test_users: torch.Tensor  # int64 [T]
    test_items: torch.Tensor  # int64 [T], the held-out positive of each test user
    test_negatives: torch.Tensor  # int64 [T, eval_negatives]
    source: str = REAL
    negatives_per_positive: int = 4  # training negatives sampled per positive, every epoch
    top_k: int = 10
    # Every known interaction (train and test) as user * num_items + item, sorted: negatives
    # are drawn outside it.
    known: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.int64))

    def model_inputs(self) -> dict[str, Any]:
        return {"num_users": self.num_users, "num_items": self.num_items}

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name, "task": self.kind, "source": self.source, "users": self.num_users,
            "items": self.num_items, "train_positives": int(self.train_users.numel()), "test_users": int(self.test_users.numel()),
        }


TaskData = DatasetSplits | TokenStreams | Interactions


def standardize(train_x: torch.Tensor, test_x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Scales both splits by the training split's mean and standard deviation."""
    mean, std = train_x.mean(), train_x.std()
    return (train_x - mean) / std, (test_x - mean) / std
