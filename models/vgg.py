"""VGG-19 with BatchNorm for 32x32 images, with a choice of classifier head.

Where from: Simonyan & Zisserman, "Very Deep Convolutional Networks for Large-Scale Image
Recognition" (ICLR 2015), configuration E: sixteen 3x3 convs in five groups, each group closed
by a 2x2 max-pool; here every conv is followed by BN + ReLU (the `vgg19_bn` of the CIFAR code
bases) and keeps its bias. Five poolings take 32x32 to 1x1, so the head sees 512 features.

The head is the part the CIFAR code bases disagree on (`head`):

- `mlp512`: Dropout, Linear(512, 512), ReLU, Dropout, Linear(512, 512), ReLU, Linear(512, classes):
  chengyangfu's pytorch-vgg-cifar10 `vgg19_bn`. The default: the DEFT/MiCRO/ExDyna releases run
  CIFAR-10 VGG-19 as `getattr(tasks.cifar_architectures, "vgg19_bn")` in the PowerSGD task code
  they build on, and that code family's `vgg19_bn` has this head (IntSGD's copy of PowerSGD's
  `tasks/cifar_architectures/vgg.py`, ACCORDION's SVHN copy). The releases' CIFAR-10 vgg.py could
  not be read, so this is inferred from that family. 20,565,834 parameters at 10 classes.
  (CIFAR-100 uses a different head in ExDyna's release: `released_cifar100` below.)
- `linear`: Linear(512, classes), kuangliu's pytorch-cifar VGG('VGG19'). 20,040,522 at 10 classes.
- `mlp4096`: Linear(512, 4096), ReLU, Dropout, Linear(4096, 4096), ReLU, Dropout,
  Linear(4096, classes), the pytorch-cifar100 model zoo's `vgg19_bn`. 38,958,922 at 10 classes.
- `released_cifar100`: Dropout, Linear(512, 4096), ReLU, Dropout, Linear(4096, 4096), ReLU,
  Dropout, Linear(4096, classes): the head of ExDyna's released CIFAR-100 VGG-19
  (`cnn-lstm/tasks/cifar100_architectures/vgg.py`). The same Linear widths as `mlp4096`, but a
  dropout before every Linear (three, the first on the 512 features) instead of after the first
  two ReLUs. The `vgg19_cifar100` workload's head. 39,327,652 parameters at 100 classes:
  features 20,035,392 + 512*4096+4096 (2,101,248) + 4096*4096+4096 (16,781,312)
  + 4096*100+100 (409,700).

Features, configuration E, each conv3x3 with its bias plus BN's weight and bias (2 per channel):
3->64 1,920; 64->64 37,056; 64->128 74,112; 128->128 147,840; 128->256 295,680;
256->256 three times 590,592; 256->512 1,181,184; 512->512 seven times 2,360,832: 20,035,392.
"""
from __future__ import annotations

import torch
from torch import nn

# Conv widths of configuration E; "M" is a 2x2 max-pool.
CONFIG_E: tuple[int | str, ...] = (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M")
FEATURES = 512
HEADS = ("mlp512", "linear", "mlp4096", "released_cifar100")


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
    if head == "released_cifar100":
        return nn.Sequential(
            nn.Dropout(dropout), nn.Linear(FEATURES, 4096), nn.ReLU(inplace=True),
            nn.Dropout(dropout), nn.Linear(4096, 4096), nn.ReLU(inplace=True),
            nn.Dropout(dropout), nn.Linear(4096, num_classes),
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
