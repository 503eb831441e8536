"""The gradient layout of CIFAR ResNet-18 (11,173,962 elements), the papers' reference model,
built from torchvision's ResNet-18 with the CIFAR stem (3x3 stride-1 conv1, no max-pool)."""
from __future__ import annotations

from torch import nn

from sparsifiers.common.layout import Layout

RESNET18_CIFAR_NUMEL = 11_173_962


def resnet18_cifar_layout(num_classes: int = 10) -> Layout:
    from torchvision.models import resnet18

    model = resnet18(num_classes=num_classes)
    model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    layout = Layout.from_module(model)
    assert layout.numel == RESNET18_CIFAR_NUMEL, layout.numel
    return layout
