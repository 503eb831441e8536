"""GoogLeNet for 32x32 images: the widely used CIFAR variant of Szegedy et al.'s Inception-v1.

Where from: "Going Deeper with Convolutions" (CVPR 2015) stacks Inception modules a3..b5 with
the filter counts of its Table 1. The CIFAR variant (kuangliu's pytorch-cifar, the DEFT/MiCRO/
ExDyna releases' CIFAR-10 model) replaces the ImageNet stem with one 3x3 conv to 192 channels,
writes the 5x5 branch as two 3x3 convs, puts BN + ReLU after every conv, keeps the conv biases
(redundant before BN, but part of the released count) and drops the auxiliary classifiers.
Parameters: 6,166,250 at 10 classes, 6,258,500 at 100. The releases' CIFAR-100 `googlenet` (the
pytorch-cifar100 zoo's early version, one stem conv) has the same parameters; it differs only in
an unpadded stem and dropout 0.4 before the classifier (the `dropout` knob).
"""
from __future__ import annotations

import torch
from torch import nn

STEM_WIDTH = 192
# Per module: (in, 1x1, 3x3 reduce, 3x3, "5x5" reduce, "5x5", pool projection), Table 1 of the paper.
INCEPTION_3 = {"a3": (192, 64, 96, 128, 16, 32, 32), "b3": (256, 128, 128, 192, 32, 96, 64)}
INCEPTION_4 = {
    "a4": (480, 192, 96, 208, 16, 48, 64),
    "b4": (512, 160, 112, 224, 24, 64, 64),
    "c4": (512, 128, 128, 256, 24, 64, 64),
    "d4": (512, 112, 144, 288, 32, 64, 64),
    "e4": (528, 256, 160, 320, 32, 128, 128),
}
INCEPTION_5 = {"a5": (832, 256, 160, 320, 32, 128, 128), "b5": (832, 384, 192, 384, 48, 128, 128)}
OUT_WIDTH = 1024  # channels b5 emits: 384 + 384 + 128 + 128


def conv_bn_relu(in_channels: int, out_channels: int, kernel_size: int) -> list[nn.Module]:
    return [
        nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    ]


class Inception(nn.Module):
    """Four parallel branches concatenated on channels: 1x1; 1x1 -> 3x3; 1x1 -> 3x3 -> 3x3
    (the 5x5 receptive field with fewer weights); 3x3 max-pool -> 1x1."""

    def __init__(self, in_channels: int, n1x1: int, n3x3_reduce: int, n3x3: int, n5x5_reduce: int, n5x5: int, pool_proj: int) -> None:
        super().__init__()
        self.branch1x1 = nn.Sequential(*conv_bn_relu(in_channels, n1x1, 1))
        self.branch3x3 = nn.Sequential(*conv_bn_relu(in_channels, n3x3_reduce, 1), *conv_bn_relu(n3x3_reduce, n3x3, 3))
        self.branch5x5 = nn.Sequential(
            *conv_bn_relu(in_channels, n5x5_reduce, 1), *conv_bn_relu(n5x5_reduce, n5x5, 3), *conv_bn_relu(n5x5, n5x5, 3)
        )
        self.branch_pool = nn.Sequential(nn.MaxPool2d(3, stride=1, padding=1), *conv_bn_relu(in_channels, pool_proj, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.branch1x1(x), self.branch3x3(x), self.branch5x5(x), self.branch_pool(x)], dim=1)


def inception_stage(modules: dict[str, tuple[int, ...]]) -> nn.Sequential:
    return nn.Sequential(*(Inception(*widths) for widths in modules.values()))


class GoogLeNet(nn.Module):
    """Stem, inception 3 (a, b), max-pool, inception 4 (a..e), max-pool, inception 5 (a, b),
    global average pool, linear 1024 -> classes."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.stem = nn.Sequential(*conv_bn_relu(input_shape[0], STEM_WIDTH, 3))
        self.features = nn.Sequential(
            inception_stage(INCEPTION_3),
            nn.MaxPool2d(3, stride=2, padding=1),
            inception_stage(INCEPTION_4),
            nn.MaxPool2d(3, stride=2, padding=1),
            inception_stage(INCEPTION_5),
        )
        # Adaptive: the same 8x8 average on 32x32 inputs, and any other size still fits.
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(OUT_WIDTH, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.pool(self.features(self.stem(x)))
        return self.classifier(self.dropout(torch.flatten(out, 1)))
