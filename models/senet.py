"""SENet-18 for 32x32 images: ResNet-18 with a squeeze-excitation gate in every BasicBlock.

Where from: Hu et al., "Squeeze-and-Excitation Networks" (CVPR 2018): a block's output channels
are rescaled by gates computed from their global average (reduce C -> C/r, ReLU, expand, sigmoid;
r = 16). The DEFT/MiCRO/ExDyna released code trains two different SE-ResNet-18s, so `variant`
picks one:

- `pytorch_cifar` (CIFAR-10, task `senet`, architecture `SENet18` of kuangliu's pytorch-cifar):
  pre-activation blocks (BN-ReLU before each conv, no ReLU after the sum), convs without bias,
  a bare 1x1 conv (no BN) on the pre-activated input where the shape changes, the gate applied
  to the second conv's output before the sum. 11,260,354 parameters at 10 classes. A
  post-activation block with a 1x1 conv + BN shortcut would have 2,688 more (the BNs differ).
- `pytorch_cifar100` (CIFAR-100, task `senet_cifar100`, architecture `seresnet18` of the
  pytorch-cifar100 model zoo): post-activation blocks whose convs keep their biases, ReLU
  *before* the gate, a 1x1 conv (with bias) + BN shortcut, and a last stage 516 channels wide
  (the zoo's typo for 512, kept: it is what the released count measures). 11,436,256
  parameters at 100 classes; this count does not follow from the class count of the first.

Both gates are written with nn.Linear; kuangliu's 1x1 convs on a 1x1 map hold the same weights.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

STEM_WIDTH = 64
BLOCKS_PER_STAGE = 2


class SqueezeExcitation(nn.Module):
    """Per-channel gates from the global average: Linear(C, C/r), ReLU, Linear(C/r, C), sigmoid."""

    def __init__(self, channels: int, reduction: int) -> None:
        super().__init__()
        self.reduce = nn.Linear(channels, channels // reduction)
        self.expand = nn.Linear(channels // reduction, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        squeezed = x.mean(dim=(2, 3))
        gates = torch.sigmoid(self.expand(F.relu(self.reduce(squeezed))))
        return x * gates[:, :, None, None]


class PreActSEBlock(nn.Module):
    """kuangliu's SENet18 block: BN-ReLU-conv, BN-ReLU-conv, gate, + shortcut (no final ReLU)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, reduction: int) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_channels)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.se = SqueezeExcitation(out_channels, reduction)
        self.projection: nn.Module | None = None
        if stride != 1 or in_channels != out_channels:
            self.projection = nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        activated = F.relu(self.bn1(x))
        # The projection sees the pre-activated input; the identity sees the raw one.
        shortcut = self.projection(activated) if self.projection is not None else x
        out = self.conv2(F.relu(self.bn2(self.conv1(activated))))
        return self.se(out) + shortcut


class PostActSEBlock(nn.Module):
    """The pytorch-cifar100 zoo's block: conv-BN-ReLU, conv-BN-ReLU, gate, + shortcut, ReLU."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, reduction: int) -> None:
        super().__init__()
        self.residual = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(out_channels, out_channels, 3, padding=1),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
        )
        self.se = SqueezeExcitation(out_channels, reduction)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, stride=stride), nn.BatchNorm2d(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.se(self.residual(x)) + self.shortcut(x))


@dataclass(frozen=True)
class Variant:
    block: type[nn.Module]
    widths: tuple[int, int, int, int]
    stem_bias: bool


VARIANTS = {
    "pytorch_cifar": Variant(PreActSEBlock, (64, 128, 256, 512), stem_bias=False),
    "pytorch_cifar100": Variant(PostActSEBlock, (64, 128, 256, 516), stem_bias=True),
}


class SENet18(nn.Module):
    """Stem conv-BN-ReLU, four stages of two SE blocks (the last three halve the resolution),
    global average pool, linear classifier."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, variant: str = "pytorch_cifar", reduction: int = 16) -> None:
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
        spec = VARIANTS[variant]
        self.stem = nn.Sequential(
            nn.Conv2d(input_shape[0], STEM_WIDTH, 3, padding=1, bias=spec.stem_bias),
            nn.BatchNorm2d(STEM_WIDTH),
            nn.ReLU(inplace=True),
        )
        blocks: list[nn.Module] = []
        width = STEM_WIDTH
        for stage, out_channels in enumerate(spec.widths):
            for index in range(BLOCKS_PER_STAGE):
                stride = 2 if stage > 0 and index == 0 else 1
                blocks.append(spec.block(width, out_channels, stride, reduction))
                width = out_channels
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.pool(self.blocks(self.stem(x)))
        return self.classifier(torch.flatten(out, 1))
