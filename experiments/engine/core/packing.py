"""(index, value) pairs as one message: k int32 indices and k values side by side in a [k, 4 + value
bytes] uint8 tensor, bits unchanged. gTop-k's tree rounds and Ok-Topk's reduce-scatter and
all-gather send pairs this way, so that one message (one latency) carries both."""
from __future__ import annotations

import torch

INDEX_DTYPE = torch.int32  # every model here has fewer than 2**31 gradient elements


def packed(indices: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """k int32 `indices` and k `values` as one [k, 4 + value bytes] uint8 message."""
    return torch.cat([indices.contiguous().view(torch.uint8).view(indices.numel(), INDEX_DTYPE.itemsize),
                      values.contiguous().view(torch.uint8).view(values.numel(), values.element_size())], dim=1)


def unpacked(message: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """`packed`'s inverse: the int32 indices and the values of `dtype`."""
    width = INDEX_DTYPE.itemsize
    return (message[:, :width].contiguous().view(INDEX_DTYPE).view(-1),
            message[:, width:].contiguous().view(dtype).view(-1))
