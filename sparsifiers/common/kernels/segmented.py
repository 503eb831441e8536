"""Per-unit work over many contiguous ranges of one flat vector in a fixed number of torch
operations (issue #36): the batched path GPUs take (backend.batched_path), where a loop over a
model's units would launch ~25 kernels and sync the host once per unit.

    unit_norms       the 2-norm of every unit: torch._foreach_norm over the split views (one fused
                     kernel on CUDA; on the CPU it runs linalg.vector_norm per tensor, so its
                     results are those of the per-unit loop bit for bit).
    ranges           the concatenation of arange(start, start + length) over units.
    segmented_topk   ExactTopK (sparsifiers/common/kernels/topk.py) of every unit at once, the same
                     answer: the k_l largest |x| of unit l (NaN ranked as +inf), ties at the
                     k_l-th magnitude broken by lower index, each unit's indices increasing,
                     units in the order given. One stable sort of the units' magnitudes
                     (descending), one stable sort of their unit ids (so each unit's elements
                     stay in descending magnitude, equal magnitudes in index order), the first
                     k_l of each unit taken, then one sort to put each unit's indices in order.
                     No host sync: every size is known on the host.

The per-unit loop (ExactTopK unit by unit) stays the reference and the CPU's path;
tests/test_segmented.py proves the two equal. Since issue #48 a GPU ranks each unit once instead
(classed_topk.py: one torch.topk per class of similar lengths); segmented_topk stays beside it as a second
reference and as the fallback where its int64 keys do not fit (float64, 2^32 elements or more).
"""
from __future__ import annotations

import math

import torch

INDEX_BITS = 40  # global indices < 2^40; unit numbers go above them in one int64 sort key


def tiles(units: list[tuple[int, int]], numel: int) -> bool:
    """Whether the units cover [0, numel) back to back (then one split_with_sizes views them)."""
    position = 0
    for start, end in units:
        if start != position:
            return False
        position = end
    return position == numel


def unit_norms(values: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """The 2-norm of each of the back-to-back units of `values` (sizes summing to its numel)."""
    return torch.stack(torch._foreach_norm(values.split_with_sizes(sizes), 2))


def _upload(device: torch.device, *lists: list[int]) -> list[torch.Tensor]:
    """Host integers as int64 tensors on `device`, in one copy."""
    flat = torch.tensor([x for values in lists for x in values], dtype=torch.int64)
    if flat.device != device:
        flat = flat.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else flat.to(device)
    return list(flat.split_with_sizes([len(values) for values in lists]))


def _spread(per_unit: torch.Tensor, lengths: torch.Tensor, total: int) -> torch.Tensor:
    """Each unit's value repeated `length` times (output_size given: no host sync)."""
    return per_unit.repeat_interleave(lengths, output_size=total)


def ranges(starts: list[int], lengths: list[int], device: torch.device, out: torch.Tensor | None = None) -> torch.Tensor:
    """cat(arange(s, s + l) for s, l in zip(starts, lengths)) in a fixed number of ops."""
    total = sum(lengths)
    if out is None:
        out = torch.empty(total, dtype=torch.int64, device=device)
    if total == 0:
        return out
    first, length = _upload(device, starts, lengths)
    before = length.cumsum(0).sub_(length)  # where each unit begins in the output
    torch.arange(total, device=device, out=out)
    return out.add_(_spread(first - before, length, total))


def check_ks(lengths: list[int], ks: list[int]) -> None:
    """Refuses a unit's k outside 1..its length, as ExactTopK does (host integers: no op, no sync)."""
    for length, k in zip(lengths, ks):
        if not 1 <= k <= length:
            raise ValueError(f"top-k needs 1 <= k <= {length}, got k = {k}")


def segmented_topk(values: torch.Tensor, starts: list[int], lengths: list[int], ks: list[int],
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """For each unit u (values[starts[u] : starts[u] + lengths[u]]), its exact top-ks[u] global
    indices, increasing; the units' results concatenated in the order given (module docstring)."""
    check_ks(lengths, ks)
    device, units = values.device, len(starts)
    total, chosen = sum(lengths), sum(ks)
    if out is None:
        out = torch.empty(chosen, dtype=torch.int64, device=device)
    if chosen == 0:
        return out
    first, length, k = _upload(device, starts, lengths, ks)
    unit = torch.arange(units, device=device)
    before = length.cumsum(0).sub_(length)
    positions = torch.arange(total, device=device).add_(_spread(first - before, length, total))
    magnitude = values.index_select(0, positions).abs_().nan_to_num_(nan=math.inf, posinf=math.inf)
    order = torch.sort(magnitude, descending=True, stable=True).indices
    order = order.index_select(0, torch.sort(_spread(unit, length, total).index_select(0, order), stable=True).indices)
    # Unit u now occupies [before[u], before[u] + length[u]) of order, largest first: take k[u].
    k_before = k.cumsum(0).sub_(k)
    take = torch.arange(chosen, device=device).add_(_spread(before - k_before, k, chosen))
    selected = positions.index_select(0, order.index_select(0, take))
    key = _spread(unit, k, chosen).bitwise_left_shift_(INDEX_BITS).add_(selected)
    return out.copy_(torch.sort(key).values.bitwise_and_((1 << INDEX_BITS) - 1))
