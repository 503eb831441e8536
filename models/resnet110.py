"""ResNet-110 for CIFAR (He et al. 2016, section 4.2): the DGC paper's CIFAR-10 model.

Where from: "Deep Residual Learning for Image Recognition" builds CIFAR ResNets of depth 6n + 2:
a 3x3 conv to 16 channels, then three stages of n BasicBlocks at widths 16, 32 and 64 (the
second and third halve the resolution in their first block), global average pooling and a linear
classifier. n = 18 gives 110 layers. The paper's CIFAR nets use "option A" shortcuts: where a
block changes shape, the identity is subsampled (stride 2) and zero-padded to the new width, so
the shortcut has no parameters. DGC's released code (mini-torchpack's `resnet110`, a
fb.resnet.torch port) does the same.

Parameter counts at 10 classes: 1,727,962 with option A (the default, the paper's and DGC's).
The often-quoted 1,730,714 (e.g. pytorchcv's `resnet110_cifar10`) is the same network with
"option B" projection shortcuts: a 1x1 stride-2 conv + BN at the two downsampling blocks,
16*32 + 2*32 + 32*64 + 2*64 = 2,752 parameters more. `shortcut="B"` builds that one.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

BLOCKS_PER_STAGE = 18  # n in depth = 6n + 2
STAGE_WIDTHS = (16, 32, 64)
SHORTCUTS = ("A", "B")


class ZeroPadShortcut(nn.Module):
    """Option A: subsample the identity and append zero channels; no parameters."""

    def __init__(self, stride: int, out_channels: int) -> None:
        super().__init__()
        self.stride = stride
        self.out_channels = out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, 0, self.out_channels - x.shape[1]))


def projection_shortcut(in_channels: int, out_channels: int, stride: int) -> nn.Module:
    """Option B: a 1x1 conv + BN where the shape changes."""
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=stride, bias=False),
        nn.BatchNorm2d(out_channels),
    )


class BasicBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN, plus the shortcut, then ReLU."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, shortcut: str) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = (
                ZeroPadShortcut(stride, out_channels) if shortcut == "A" else projection_shortcut(in_channels, out_channels, stride)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet110(nn.Module):
    """ResNet-110 (3 stages of 18 BasicBlocks, widths 16/32/64) for small images."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, shortcut: str = "A") -> None:
        super().__init__()
        if shortcut not in SHORTCUTS:
            raise ValueError(f"shortcut must be one of {', '.join(SHORTCUTS)}, got {shortcut!r}")
        width = STAGE_WIDTHS[0]
        self.stem = nn.Sequential(
            nn.Conv2d(input_shape[0], width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
        )
        blocks: list[nn.Module] = []
        for stage, out_channels in enumerate(STAGE_WIDTHS):
            for index in range(BLOCKS_PER_STAGE):
                stride = 2 if stage > 0 and index == 0 else 1
                blocks.append(BasicBlock(width, out_channels, stride, shortcut))
                width = out_channels
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(width, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                # He et al.'s initialisation, as in the paper and DGC's code.
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.pool(self.blocks(self.stem(x)))
        return self.classifier(torch.flatten(out, 1))
