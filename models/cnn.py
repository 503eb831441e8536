"""A small CNN with BatchNorm (so every rank has buffers of its own), for 28x28 or 8x8 inputs."""
from __future__ import annotations

from torch import nn


class SmallCNN(nn.Module):
    """conv-BN-ReLU-pool x2, adaptive pooling to 4x4, then a two-layer classifier head."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, width: int = 16, hidden: int = 128) -> None:
        super().__init__()
        channels = input_shape[0]
        self.features = nn.Sequential(
            nn.Conv2d(channels, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1, bias=False),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.AdaptiveAvgPool2d(4),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(2 * width * 16, hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x):
        return self.classifier(self.features(x))
