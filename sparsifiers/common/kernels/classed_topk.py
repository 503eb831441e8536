"""Per-unit exact top-k in about one pass over the units (issue #48): the GPU path of DEFT's and
Accordion's selection. The answer is segmented_topk's (segmented.py), which stays beside it as a
reference with the per-unit loop (ExactTopK unit by unit): the k_l largest |x| of unit l, NaN
ranked as +inf, ties at the k_l-th magnitude broken by lower index, each unit's indices
increasing, units in the order given. segmented_topk sorts the whole share twice; this ranks it
once, with torch.topk, which on a GPU is a radix select (about one pass per digit).

    1. Classes (host, classed_plan.py): units grouped by length, each class a matrix with one
       row per unit, as wide as its longest unit; the grouping is the one the calibrated
       selection model reads cheapest (operations per class against padded ranked bytes).
    2. One int64 key per padded slot: key = base - m * 2^32, m the bits of |x| (the sign bit
       cleared, NaN clamped to inf's bits: nonnegative floats order as their bits), base the
       element's index (PADDING past a unit's end). The smallest key is the largest |x|, then
       the lowest index, and no two keys tie, so torch.topk's unspecified order among equal
       values never matters. Where each slot reads and its base depend only on the layout:
       classed_plan caches them, so a repeated layout (DEFT's bins) spends no operation on them.
    3. One torch.topk (smallest, sorted) per class with k = the class's largest k_l: row l's
       first k_l keys are exactly unit l's selection.
    4. Each unit's first k_l keys gathered in the order given (one repeat_interleave numbers the
       selected slots' units); the index is key mod 2^32; one sort of (unit << 40 | index) over
       the k_l's sum puts each unit's indices in order.

About 16 operations plus 2 per class (as_strided, topk) on a cached layout, and where there are
two classes or more one view per class and a cat to join their tops; 6 more (11 where a row is
padded) to build a layout. None syncs the host: every size is known on the host.
Needs float32, float16 or bfloat16 values (the bits of |x| fit beside a 32-bit index) and fewer
than 2^32 elements; anything else takes segmented_topk (`unit_topk` chooses).
"""
from __future__ import annotations

import torch

from sparsifiers.common.kernels.classed_plan import RowLayout, row_layout
from sparsifiers.common.kernels.segmented import INDEX_BITS, _upload, check_ks, segmented_topk

KEY_SHIFT = 32  # |x|'s bits above a 32-bit index
# dtype -> (the integer dtype of its bits, the bits below the sign, inf's bits: NaN clamps to them)
BITS = {
    torch.float32: (torch.int32, 0x7FFFFFFF, 0x7F800000),
    torch.float16: (torch.int16, 0x7FFF, 0x7C00),
    torch.bfloat16: (torch.int16, 0x7FFF, 0x7F80),
}


def supports(values: torch.Tensor) -> bool:
    """Whether classed_topk applies: a dtype whose magnitude bits fit beside a 32-bit index."""
    return values.dtype in BITS and values.numel() < 1 << KEY_SHIFT


def unit_topk(values: torch.Tensor, starts: list[int], lengths: list[int], ks: list[int],
              out: torch.Tensor | None = None) -> torch.Tensor:
    """The batched per-unit top-k: classed_topk where it applies, else segmented_topk (the same answer)."""
    chosen = classed_topk if supports(values) else segmented_topk
    return chosen(values, starts, lengths, ks, out=out)


def _take(layout: RowLayout, ks: list[int]) -> tuple[list[int], list[int]]:
    """Per class its topk's k (the largest k_l); per unit where its keys begin in the joined
    tops, minus its place in the answer (module docstring, step 4)."""
    first_key, top_place, k_classes = [0] * len(ks), 0, []
    for units in layout.classes:
        k_class = max(ks[u] for u in units)
        k_classes.append(k_class)
        for u in units:
            first_key[u] = top_place
            top_place += k_class
    take, before = [], 0
    for u, k in enumerate(ks):
        take.append(first_key[u] - before)
        before += k
    return k_classes, take


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
    layout = row_layout(values, starts, lengths)
    k_classes, take_list = _take(layout, ks)
    take, k_unit = _upload(device, take_list, ks)
    integer, magnitude, infinity = BITS[values.dtype]
    bits = values.index_select(0, layout.positions).view(integer).bitwise_and_(magnitude).clamp_(max=infinity)
    key = torch.sub(layout.base, bits, alpha=1 << KEY_SHIFT)
    tops, row_start = [], 0
    for units, width, k_class in zip(layout.classes, layout.widths, k_classes):
        matrix = key.as_strided((len(units), width), (width, 1), row_start)
        tops.append(torch.topk(matrix, k_class, dim=1, largest=False, sorted=True).values)
        row_start += len(units) * width
    # Each unit's first k_u keys, in the order given; the index is the key mod 2^32. One class's
    # tops are read in place (torch.take reads a matrix as flat), several are joined first.
    unit = torch.repeat_interleave(k_unit, output_size=chosen)  # each selected slot's unit
    where = torch.arange(chosen, device=device).add_(take.index_select(0, unit))
    top = tops[0] if len(tops) == 1 else torch.cat([t.view(-1) for t in tops])
    selected = torch.take(top, where).bitwise_and_((1 << KEY_SHIFT) - 1)
    ordered = torch.sort(selected.add_(unit, alpha=1 << INDEX_BITS)).values
    return torch.bitwise_and(ordered, (1 << INDEX_BITS) - 1, out=out)
