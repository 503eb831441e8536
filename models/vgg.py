"""VGG-19 with BatchNorm for 32x32 images, with a choice of classifier head.

Where from: Simonyan & Zisserman, "Very Deep Convolutional Networks for Large-Scale Image
Recognition" (ICLR 2015), configuration E: sixteen 3x3 convs in five groups, each group closed
by a 2x2 max-pool; here every conv is followed by BN + ReLU (the `vgg19_bn` of the CIFAR code
bases) and keeps its bias. Five poolings take 32x32 to 1x1, so the head sees 512 features.

The head is the part the CIFAR code bases disagree on (`head`):

- `mlp512`: Dropout, Linear(512, 512), ReLU, Dropout, Linear(512, 512), ReLU, Linear(512, classes):
  chengyangfu's pytorch-vgg-cifar10 `vgg19_bn`. The default: the DEFT/MiCRO/ExDyna releases run
  VGG-19 on CIFAR-10 only, as `getattr(tasks.cifar_architectures, "vgg19_bn")` in the PowerSGD
  task code they build on, and that code family's `vgg19_bn` has this head (IntSGD's copy of
  PowerSGD's `tasks/cifar_architectures/vgg.py`, ACCORDION's SVHN copy). The releases' own vgg.py
  could not be read, so this is inferred from that family. 20,565,834 parameters at 10 classes.
- `linear`: Linear(512, classes), kuangliu's pytorch-cifar VGG('VGG19'). 20,040,522 at 10 classes.
- `mlp4096`: Linear(512, 4096), ReLU, Dropout, Linear(4096, 4096), ReLU, Dropout,
  Linear(4096, classes), the pytorch-cifar100 model zoo's `vgg19_bn`. 38,958,922 at 10 classes.
"""
from __future__ import annotations

import torch
from torch import nn

# Conv widths of configuration E; "M" is a 2x2 max-pool.
CONFIG_E: tuple[int | str, ...] = (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M")
FEATURES = 512
HEADS = ("mlp512", "linear", "mlp4096")


def vgg_features(in_channels: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in CONFIG_E:
        if width == "M":
            # ceil_mode: identical on 32x32 (every size is even), and inputs smaller than 32x32
            # (8x8 digits) still reach 1x1 instead of an empty map.
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2, ceil_mode=True))
        else:
            layers += [nn.Conv2d(in_channels, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(inplace=True)]
            in_channels = width
    return nn.Sequential(*layers)


def vgg_head(head: str, num_classes: int, dropout: float) -> nn.Sequential:
    if head == "linear":
        return nn.Sequential(nn.Linear(FEATURES, num_classes))
    if head == "mlp512":
        return nn.Sequential(
            nn.Dropout(dropout), nn.Linear(FEATURES, 512), nn.ReLU(inplace=True),
            nn.Dropout(dropout), nn.Linear(512, 512), nn.ReLU(inplace=True),
            nn.Linear(512, num_classes),
        )
    if head == "mlp4096":
        return nn.Sequential(
            nn.Linear(FEATURES, 4096), nn.ReLU(inplace=True), nn.Dropout(dropout),
            nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout(dropout),
            nn.Linear(4096, num_classes),
        )
    raise ValueError(f"head must be one of {', '.join(HEADS)}, got {head!r}")


class VGG19(nn.Module):
    """Configuration E with BN, flattened 512 features, then the chosen head."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, head: str = "mlp512", dropout: float = 0.5) -> None:
        super().__init__()
        self.features = vgg_features(input_shape[0])
        self.classifier = vgg_head(head, num_classes, dropout)
        for module in self.features:
            if isinstance(module, nn.Conv2d):
                # He initialisation (fan-out), as in the CIFAR VGG code bases, which train from scratch.
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.features(x)
        # Flatten, not pool: on 32x32 the map is already 1x1, exactly as the CIFAR code bases do it.
        return self.classifier(torch.flatten(out, 1))
