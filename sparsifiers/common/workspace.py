"""Full-size scratch buffers shared by every sparsifier of one process.

Hosted ranks select one after another, so a temporary as large as the gradient (|acc|, a mask)
can be one buffer for all of them: memory stays about one residual per hosted rank instead of
two or three. A scratch buffer holds nothing between calls; what a method keeps (its selection,
its state) must live in its own tensors.
"""
from __future__ import annotations

import torch

_BUFFERS: dict[tuple[str, torch.dtype, torch.device], torch.Tensor] = {}


def scratch(name: str, numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A 1-D buffer of `numel` elements, reused across calls and across hosted ranks."""
    key = (name, dtype, torch.device(device))
    buffer = _BUFFERS.get(key)
    if buffer is None or buffer.numel() < numel:
        # Grown by half again: slices that creep up (ExDyna's moving partitions) reallocate a
        # handful of times per run, not at every step.
        grown = 0 if buffer is None else buffer.numel() * 3 // 2
        buffer = torch.empty(max(numel, grown), dtype=dtype, device=device)
        _BUFFERS[key] = buffer
    return buffer[:numel]


def scratch_like(name: str, tensor: torch.Tensor) -> torch.Tensor:
    return scratch(name, tensor.numel(), tensor.dtype, tensor.device).view_as(tensor)
