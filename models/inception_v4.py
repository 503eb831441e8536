"""Inception-v4 for 32x32 images: the pytorch-cifar100 model zoo's `inceptionv4`, the CIFAR-100
model of the ExDyna release (task `inceptionv4_cifar100`).

Where from: Szegedy et al., "Inception-v4, Inception-ResNet and the Impact of Residual
Connections on Learning" (AAAI 2017), Figures 3-9: a stem, 4 Inception-A, Reduction-A (with
k, l, m, n = 192, 224, 256, 384 from Table 1), 7 Inception-B, Reduction-B, 3 Inception-C, average
pooling, dropout (keep 0.8) and a linear classifier, every conv followed by BN + ReLU, no bias.
The zoo's adaptation to 32x32 (ours too) keeps every module's filter counts and changes only
resolution: the stem has no strided conv or pool (its first 3x3 conv is unpadded: 32 -> 30), so
the grids are 30x30 (A), 14x14 (B) and 7x7 (C). The release states no count for it; this
construction has 41,296,516 parameters at 100 classes (41,158,186 at 10).
"""
from __future__ import annotations

import torch
from torch import nn

INCEPTION_A_BLOCKS, INCEPTION_B_BLOCKS, INCEPTION_C_BLOCKS = 4, 7, 3
# Reduction-A filter banks of Inception-v4 (Table 1 of the paper).
K, L, M, N = 192, 224, 256, 384
STEM_OUT, A_OUT, B_OUT, C_OUT = 384, 384, 1024, 1536


class ConvBN(nn.Sequential):
    """conv (no bias: BN follows) - BN - ReLU."""

    def __init__(
        self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int], stride: int = 1, padding: int | tuple[int, int] = 0
    ) -> None:
        super().__init__(
            nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
        )


def conv1x7(in_channels: int, out_channels: int) -> ConvBN:
    return ConvBN(in_channels, out_channels, (1, 7), padding=(0, 3))


def conv7x1(in_channels: int, out_channels: int) -> ConvBN:
    return ConvBN(in_channels, out_channels, (7, 1), padding=(3, 0))


def conv1x3(in_channels: int, out_channels: int) -> ConvBN:
    return ConvBN(in_channels, out_channels, (1, 3), padding=(0, 1))


def conv3x1(in_channels: int, out_channels: int) -> ConvBN:
    return ConvBN(in_channels, out_channels, (3, 1), padding=(1, 0))


class Concat(nn.Module):
    """Runs branches on the same input and concatenates their outputs on channels."""

    def __init__(self, *branches: nn.Module) -> None:
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([branch(x) for branch in self.branches], dim=1)


def stem(in_channels: int) -> nn.Sequential:
    """Figure 3 at stride 1: three 3x3 convs, then three concatenations (conv | pool, two conv
    towers, conv | pool) to 384 channels."""
    return nn.Sequential(
        ConvBN(in_channels, 32, 3),
        ConvBN(32, 32, 3, padding=1),
        ConvBN(32, 64, 3, padding=1),
        Concat(ConvBN(64, 96, 3, padding=1), nn.MaxPool2d(3, stride=1, padding=1)),
        Concat(
            nn.Sequential(ConvBN(160, 64, 1), conv7x1(64, 64), conv1x7(64, 64), ConvBN(64, 96, 3, padding=1)),
            nn.Sequential(ConvBN(160, 64, 1), ConvBN(64, 96, 3, padding=1)),
        ),
        Concat(nn.MaxPool2d(3, stride=1, padding=1), ConvBN(192, 192, 3, padding=1)),
    )


def inception_a(in_channels: int) -> Concat:
    """Figure 4: 384 channels out."""
    return Concat(
        nn.Sequential(ConvBN(in_channels, 64, 1), ConvBN(64, 96, 3, padding=1), ConvBN(96, 96, 3, padding=1)),
        nn.Sequential(ConvBN(in_channels, 64, 1), ConvBN(64, 96, 3, padding=1)),
        ConvBN(in_channels, 96, 1),
        nn.Sequential(nn.AvgPool2d(3, stride=1, padding=1), ConvBN(in_channels, 96, 1)),
    )


def reduction_a(in_channels: int) -> Concat:
    """Figure 7: halves the grid; in + n + m channels out."""
    return Concat(
        nn.Sequential(ConvBN(in_channels, K, 1), ConvBN(K, L, 3, padding=1), ConvBN(L, M, 3, stride=2)),
        ConvBN(in_channels, N, 3, stride=2),
        nn.MaxPool2d(3, stride=2),
    )


def inception_b(in_channels: int) -> Concat:
    """Figure 5: 1024 channels out."""
    return Concat(
        ConvBN(in_channels, 384, 1),
        nn.Sequential(ConvBN(in_channels, 192, 1), conv1x7(192, 224), conv7x1(224, 256)),
        nn.Sequential(ConvBN(in_channels, 192, 1), conv1x7(192, 192), conv7x1(192, 224), conv1x7(224, 224), conv7x1(224, 256)),
        nn.Sequential(nn.AvgPool2d(3, stride=1, padding=1), ConvBN(in_channels, 128, 1)),
    )


def reduction_b(in_channels: int) -> Concat:
    """Figure 8: halves the grid; in + 192 + 320 channels out."""
    return Concat(
        nn.Sequential(ConvBN(in_channels, 192, 1), ConvBN(192, 192, 3, stride=2, padding=1)),
        nn.Sequential(ConvBN(in_channels, 256, 1), conv1x7(256, 256), conv7x1(256, 320), ConvBN(320, 320, 3, stride=2, padding=1)),
        nn.MaxPool2d(3, stride=2, padding=1),
    )


class InceptionC(nn.Module):
    """Figure 6: two of its towers fork into a 1x3 and a 3x1 conv; 1536 channels out."""

    def __init__(self, in_channels: int) -> None:
        super().__init__()
        self.branch1x1 = ConvBN(in_channels, 256, 1)
        self.branch3x3 = ConvBN(in_channels, 384, 1)
        self.branch3x3_forks = Concat(conv1x3(384, 256), conv3x1(384, 256))
        self.branch_stack = nn.Sequential(ConvBN(in_channels, 384, 1), conv1x3(384, 448), conv3x1(448, 512))
        self.branch_stack_forks = Concat(conv1x3(512, 256), conv3x1(512, 256))
        self.branch_pool = nn.Sequential(nn.AvgPool2d(3, stride=1, padding=1), ConvBN(in_channels, 256, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat(
            [
                self.branch1x1(x),
                self.branch3x3_forks(self.branch3x3(x)),
                self.branch_stack_forks(self.branch_stack(x)),
                self.branch_pool(x),
            ],
            dim=1,
        )


class InceptionV4(nn.Module):
    """Stem, 4 x A, Reduction-A, 7 x B, Reduction-B, 3 x C, global average pool, dropout, linear."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, dropout: float = 0.2) -> None:
        super().__init__()
        self.features = nn.Sequential(
            stem(input_shape[0]),
            *(inception_a(STEM_OUT) for _ in range(INCEPTION_A_BLOCKS)),
            reduction_a(A_OUT),
            *(inception_b(A_OUT + N + M) for _ in range(INCEPTION_B_BLOCKS)),
            reduction_b(B_OUT),
            *(InceptionC(C_OUT) for _ in range(INCEPTION_C_BLOCKS)),
        )
        # Adaptive: the zoo's 7x7 average on 32x32 inputs; smaller inputs still reach 1x1.
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(C_OUT, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.pool(self.features(x))
        return self.classifier(self.dropout(torch.flatten(out, 1)))
