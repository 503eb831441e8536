"""The flat layout: every gradient of a model lives in one contiguous buffer.

A `Layout` lists the segments of that buffer in parameter order. Sparsifiers work on global
indices into the buffer; methods that care about tensors (DEFT's units) read the segments.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import torch


@dataclass(frozen=True)
class Segment:
    """One parameter tensor's place in the flat buffer."""

    name: str
    offset: int
    numel: int
    shape: tuple[int, ...]

    @property
    def end(self) -> int:
        return self.offset + self.numel


@dataclass(frozen=True)
class Layout:
    """Segments of a flat buffer, contiguous and in parameter order."""

    segments: tuple[Segment, ...]

    @property
    def numel(self) -> int:
        return self.segments[-1].end if self.segments else 0

    @classmethod
    def from_shapes(cls, named_shapes: Iterable[tuple[str, Sequence[int]]]) -> "Layout":
        """Builds a layout from (name, shape) pairs, packing them back to back."""
        segments, offset = [], 0
        for name, shape in named_shapes:
            numel = 1
            for size in shape:
                numel *= int(size)
            segments.append(Segment(name, offset, numel, tuple(int(s) for s in shape)))
            offset += numel
        return cls(tuple(segments))

    @classmethod
    def from_module(cls, module: torch.nn.Module) -> "Layout":
        """The layout of a module's trainable parameters, in `named_parameters()` order."""
        return cls.from_shapes(
            (name, tuple(p.shape)) for name, p in module.named_parameters() if p.requires_grad
        )


def even_splits(total: int, parts: int) -> list[tuple[int, int]]:
    """Splits [0, total) into `parts` contiguous (start, end) ranges whose sizes differ by at most
    one, the first `total % parts` one larger (the DEFT and MiCRO papers' rule)."""
    base, extra = divmod(total, parts)
    bounds, start = [], 0
    for p in range(parts):
        end = start + base + (1 if p < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds
