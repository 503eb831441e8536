"""ResNet-18 and ResNet-152 for 32x32 images: torchvision's ResNets with the CIFAR stem.

Where from: He et al., "Deep Residual Learning for Image Recognition" (CVPR 2016) define the
ImageNet ResNets; the CIFAR variant used by the DEFT/MiCRO/ExDyna released code (kuangliu's
pytorch-cifar for CIFAR-10, the pytorch-cifar100 model zoo for CIFAR-100) keeps every block and
replaces only the stem: a 3x3 stride-1 conv (no bias) instead of the 7x7 stride-2 conv, and no
max-pool, so that a 32x32 image still has 4x4 positions before the global pool.

Why torchvision: its ResNet is the reference implementation and is tested upstream; taking it
and swapping the stem gives the released parameter counts exactly (ResNet-18: 11,173,962 at 10
classes, 11,220,132 at 100) without a second copy of the blocks.
"""
from __future__ import annotations

from torch import nn
from torchvision.models import ResNet
from torchvision.models import resnet18 as torchvision_resnet18
from torchvision.models import resnet152 as torchvision_resnet152

STEM_WIDTH = 64  # channels of torchvision's stem, which layer1 expects


def with_cifar_stem(model: ResNet, in_channels: int) -> ResNet:
    """Replaces the ImageNet stem (7x7 stride-2 conv, 3x3 max-pool) with a 3x3 stride-1 conv."""
    model.conv1 = nn.Conv2d(in_channels, STEM_WIDTH, kernel_size=3, stride=1, padding=1, bias=False)
    # The same initialisation torchvision gives its own convs, so the new stem is not the odd one out.
    nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    model.maxpool = nn.Identity()
    return model


def resnet18(input_shape: tuple[int, ...], num_classes: int) -> ResNet:
    """CIFAR ResNet-18: BasicBlocks [2, 2, 2, 2], widths 64-512, 1x1 conv + BN shortcuts."""
    return with_cifar_stem(torchvision_resnet18(num_classes=num_classes), input_shape[0])


def resnet152(input_shape: tuple[int, ...], num_classes: int) -> ResNet:
    """CIFAR ResNet-152: Bottlenecks [3, 8, 36, 3] (58,156,618 parameters at 10 classes)."""
    return with_cifar_stem(torchvision_resnet152(num_classes=num_classes), input_shape[0])
