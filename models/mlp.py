"""A multilayer perceptron on flattened inputs."""
from __future__ import annotations

import math

from torch import nn


class MLP(nn.Module):
    """Linear-ReLU layers of width `hidden`, `depth` of them, then a linear classifier."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, hidden: int = 256, depth: int = 2) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = math.prod(input_shape)
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.ReLU(inplace=True)]
            width = hidden
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)
