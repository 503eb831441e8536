"""Layouts for the operation-count tests (tests/test_op_counts.py): the tensor counts of CIFAR
ResNet-18 (62 tensors) and of a ResNet-152-like network (several hundred), with every tensor
scaled down so that N stays small; the counts must not depend on N or on the tensor count."""
from __future__ import annotations

from sparsifiers.common.layout import Layout


def resnet18_shapes() -> list[tuple[int, ...]]:
    """CIFAR ResNet-18's parameter shapes, in order (62 tensors)."""
    shapes: list[tuple[int, ...]] = [(64, 3, 3, 3), (64,), (64,)]
    in_planes = 64
    for planes, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for block in range(2):
            shapes += [(planes, in_planes, 3, 3), (planes,), (planes,), (planes, planes, 3, 3), (planes,), (planes,)]
            if block == 0 and (stride != 1 or in_planes != planes):
                shapes += [(planes, in_planes, 1, 1), (planes,), (planes,)]
            in_planes = planes
    return shapes + [(10, 512), (10,)]


def resnet152_like_shapes() -> list[tuple[int, ...]]:
    """A bottleneck ResNet with ResNet-152's block counts (3, 8, 36, 3): 467 tensors."""
    shapes: list[tuple[int, ...]] = [(64, 3, 3, 3), (64,), (64,)]
    in_planes = 64
    for planes, blocks in ((64, 3), (128, 8), (256, 36), (512, 3)):
        for block in range(blocks):
            shapes += [(planes, in_planes, 1, 1), (planes,), (planes,), (planes, planes, 3, 3), (planes,), (planes,),
                       (4 * planes, planes, 1, 1), (4 * planes,), (4 * planes,)]
            if block == 0:
                shapes += [(4 * planes, in_planes, 1, 1), (4 * planes,), (4 * planes,)]
            in_planes = 4 * planes
    return shapes + [(100, 2048), (100,)]


def small_layout(shapes: list[tuple[int, ...]], budget: int = 200_000) -> Layout:
    """The tensors of `shapes` in order, each shrunk (by the same factor, at least 1 element) so
    that N is about `budget`: the tensor count and the spread of sizes stay."""
    sizes = []
    for shape in shapes:
        n = 1
        for s in shape:
            n *= s
        sizes.append(n)
    scale = max(1.0, sum(sizes) / budget)
    return Layout.from_shapes((f"t{i}", (max(1, int(n / scale)),)) for i, n in enumerate(sizes))
