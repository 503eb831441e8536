"""One contiguous gradient buffer for a whole model, with every `param.grad` a view into it.

Backward writes straight into the buffer, sparsifiers index it with global positions, and the
aggregate is written back into it before the optimizer step: no per-step concatenation.
"""
from __future__ import annotations

import hashlib

import torch

from sparsifiers.common.layout import Layout


def bind_flat_grad(module: torch.nn.Module) -> tuple[torch.Tensor, Layout]:
    """Allocates the buffer and points each trainable parameter's `.grad` at its segment.

    Never call `zero_grad(set_to_none=True)` afterwards: it would drop the views. Zero the buffer
    instead (`flat.zero_()`).
    """
    layout = Layout.from_module(module)
    parameters = [p for p in module.parameters() if p.requires_grad]
    first = parameters[0]
    flat = torch.zeros(layout.numel, dtype=first.dtype, device=first.device)
    for parameter, segment in zip(parameters, layout.segments):
        parameter.grad = flat[segment.offset : segment.end].view(segment.shape)
    return flat, layout


def parameter_checksum(module: torch.nn.Module) -> torch.Tensor:
    """Two float64 numbers per model (sum and sum of squares of every parameter): cheap to
    all-gather, and different replicas practically never agree on both by chance."""
    total = torch.zeros(2, dtype=torch.float64)
    for parameter in module.parameters():
        values = parameter.detach().double()
        total[0] += values.sum().cpu()
        total[1] += values.square().sum().cpu()
    return total


def parameters_sha256(module: torch.nn.Module) -> str:
    """A digest of every parameter's bytes, in order: two runs trained to bitwise-equal
    parameters, and only those, share it (summary.json records it)."""
    digest = hashlib.sha256()
    for parameter in module.parameters():
        digest.update(parameter.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
