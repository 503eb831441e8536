"""Per-unit exact top-k in about one pass over the units (issue #48): the GPU path of DEFT's and
Accordion's selection. The answer is segmented_topk's (segmented.py), which stays beside it as a
reference with the per-unit loop (ExactTopK unit by unit): the k_l largest |x| of unit l, NaN
ranked as +inf, ties at the k_l-th magnitude broken by lower index, each unit's indices
increasing, units in the order given. segmented_topk sorts the whole share twice; this ranks it
once, with torch.topk, which on a GPU is a radix select (about one pass per digit).

    1. Size classes (host): unit l goes to class bit_length(length_l - 1); each class is a matrix,
       one row per unit, as wide as its longest unit. Padding at most doubles the work, and the
       number of classes grows only with the log of the size range. A class whose rows would
       gain at most MERGE_PADDING elements as wide as the next class's joins it.
    2. One int64 key per element, in one gather over the padded rows: key = index - m * 2^32,
       m the bits of |x| (the sign bit cleared, NaN clamped to inf's bits: nonnegative floats
       order as their bits). The smallest key is the largest |x|, then the lowest index, and no
       two keys tie, so torch.topk's unspecified order among equal values never matters. Padding
       gets the largest key.
    3. One torch.topk (smallest, sorted) per class with k = the class's largest k_l: row l's
       first k_l keys are exactly unit l's selection.
    4. Each unit's first k_l keys gathered in the order given; the index is key mod 2^32; one
       sort of (unit << 40 | index) over the k_l's sum puts each unit's indices in order.

About 24 operations plus 3 per size class (one more to join two or more, 4 where a row is
padded), none of which syncs the host: every size is known on the host. Needs float32, float16
or bfloat16 values (the bits of |x| fit beside a 32-bit index) and fewer than 2^32 elements;
anything else takes segmented_topk (`unit_topk` chooses).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from sparsifiers.common.kernels.segmented import INDEX_BITS, _spread, _upload, check_ks, segmented_topk

KEY_SHIFT = 32  # |x|'s bits above a 32-bit index
# A class costs three operations (view, topk, view), about 23 us on an H200; 2^18 more int64 keys
# (2.1 MB) rank in about 19 us at the 111 GB/s the selection model measures (docs/speed.md).
MERGE_PADDING = 1 << 18
PADDING = torch.iinfo(torch.int64).max  # the largest key: never among a row's first k_l
# dtype -> (the integer dtype of its bits, the bits below the sign, inf's bits: NaN clamps to them)
BITS = {
    torch.float32: (torch.int32, 0x7FFFFFFF, 0x7F800000),
    torch.float16: (torch.int16, 0x7FFF, 0x7C00),
    torch.bfloat16: (torch.int16, 0x7FFF, 0x7F80),
}


def size_class(length: int) -> int:
    """The power of two a unit is padded towards: units of (2^(c-1), 2^c] share class c."""
    return (length - 1).bit_length()


def supports(values: torch.Tensor) -> bool:
    """Whether classed_topk applies: a dtype whose magnitude bits fit beside a 32-bit index."""
    return values.dtype in BITS and values.numel() < 1 << KEY_SHIFT


def unit_topk(values: torch.Tensor, starts: list[int], lengths: list[int], ks: list[int],
              out: torch.Tensor | None = None) -> torch.Tensor:
    """The batched per-unit top-k: classed_topk where it applies, else segmented_topk (the same answer)."""
    chosen = classed_topk if supports(values) else segmented_topk
    return chosen(values, starts, lengths, ks, out=out)


@dataclass
class _Plan:
    """Everything classed_topk needs from the host, computed before any operation."""

    classes: list[tuple[int, int, int]] = field(default_factory=list)  # (rows, width, k) per class
    shift: list[int] = field(default_factory=list)  # per row: its first element's index minus its place
    limit: list[int] = field(default_factory=list)  # per row: the end of its unit
    width: list[int] = field(default_factory=list)  # per row: its class's width
    take: list[int] = field(default_factory=list)  # per unit: where its keys begin in the tops, minus its place
    padded: bool = False  # whether any row is wider than its unit
    reach: int = 0  # the end of the furthest row


def _classes(lengths: list[int]) -> list[list[int]]:
    """The units by size class, smallest first; a class whose rows, widened to the next class's
    width, gain at most MERGE_PADDING elements joins it (one topk fewer for at most 2^18 keys)."""
    by_class: dict[int, list[int]] = {}
    for unit, length in enumerate(lengths):
        by_class.setdefault(size_class(length), []).append(unit)
    classes = [by_class[c] for c in sorted(by_class)]
    merged: list[list[int]] = []
    for units in classes:
        if merged:
            small, width = merged[-1], max(lengths[u] for u in units)
            if sum(width - lengths[u] for u in small) <= MERGE_PADDING:
                units = small + units
                merged.pop()
        merged.append(units)
    return merged


def _plan(starts: list[int], lengths: list[int], ks: list[int]) -> _Plan:
    """The size classes, smallest first, one row per unit in the order given (module docstring)."""
    plan, first_key, place, top_place = _Plan(), [0] * len(ks), 0, 0
    for units in _classes(lengths):
        width, k_class = max(lengths[u] for u in units), max(ks[u] for u in units)
        plan.classes.append((len(units), width, k_class))
        for u in units:
            plan.shift.append(starts[u] - place)
            plan.limit.append(starts[u] + lengths[u])
            plan.width.append(width)
            plan.padded |= lengths[u] < width
            plan.reach = max(plan.reach, starts[u] + width)
            first_key[u] = top_place  # unit u's keys, largest |x| first, begin here in the tops
            place += width
            top_place += k_class
    before = 0
    for u, k in enumerate(ks):
        plan.take.append(first_key[u] - before)
        before += k
    return plan


def classed_topk(values: torch.Tensor, starts: list[int], lengths: list[int], ks: list[int],
                 out: torch.Tensor | None = None) -> torch.Tensor:
    """For each unit u (values[starts[u] : starts[u] + lengths[u]]), its exact top-ks[u] global
    indices, increasing; the units' results concatenated in the order given (module docstring)."""
    check_ks(lengths, ks)
    if not supports(values):
        raise ValueError(f"classed_topk needs float32, float16 or bfloat16 and < 2^32 elements, got "
                         f"{values.dtype} x {values.numel()}: unit_topk falls back to segmented_topk")
    device, chosen = values.device, sum(ks)
    if out is None:
        out = torch.empty(chosen, dtype=torch.int64, device=device)
    if chosen == 0:
        return out
    plan = _plan(starts, lengths, ks)
    shift, limit, width, take, k_unit, unit_key = _upload(
        device, plan.shift, plan.limit if plan.padded else [], plan.width, plan.take, ks,
        [u << INDEX_BITS for u in range(len(ks))])
    key = _keys(values, plan, shift, limit, width)
    tops, row_start = [], 0
    for rows, width_c, k_class in plan.classes:
        matrix = key.as_strided((rows, width_c), (width_c, 1), row_start)
        tops.append(torch.topk(matrix, k_class, dim=1, largest=False, sorted=True).values.view(-1))
        row_start += rows * width_c
    top = tops[0] if len(tops) == 1 else torch.cat(tops)
    # Each unit's first k_u keys, in the order given; the index is the key mod 2^32.
    where = torch.arange(chosen, device=device).add_(_spread(take, k_unit, chosen))
    selected = top.index_select(0, where).bitwise_and_((1 << KEY_SHIFT) - 1)
    ordered = torch.sort(selected.add_(_spread(unit_key, k_unit, chosen))).values
    return torch.bitwise_and(ordered, (1 << INDEX_BITS) - 1, out=out)


def _keys(values: torch.Tensor, plan: _Plan, shift: torch.Tensor, limit: torch.Tensor,
          width: torch.Tensor) -> torch.Tensor:
    """The padded rows' keys, class by class, row by row (module docstring, step 2). Row r of
    width w reads values[start : start + w]; past the unit's end it holds PADDING."""
    total = len(plan.width) and sum(plan.width)
    positions = torch.arange(total, device=values.device).add_(_spread(shift, width, total))
    outside = positions >= _spread(limit, width, total) if plan.padded else None
    if plan.reach > values.numel():  # the last rows' padding runs past the end: read anything inside
        positions.clamp_(max=values.numel() - 1)
    integer, magnitude, infinity = BITS[values.dtype]
    bits = values.index_select(0, positions).view(integer).bitwise_and_(magnitude).clamp_(max=infinity)
    key = torch.sub(positions, bits, alpha=1 << KEY_SHIFT)
    if outside is not None:
        key.masked_fill_(outside, PADDING)
    return key
