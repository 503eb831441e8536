"""The host's half of classed_topk (classed_topk.py): which units share a torch.topk, and the
padded rows' gather positions and key bases, built once per layout and kept.

    classes      Units grouped by length into contiguous runs of their sorted distinct lengths,
                 each run one class padded to its longest unit. The grouping minimises the
                 end-to-end selection model's cost (sparsifiers/common/kernels/selection_model.py,
                 the H200 profile's constants): OPS_PER_CLASS operations per class (one more
                 to join the classes' tops) against the padded keys' ranked bytes. A small
                 dynamic programme over the distinct lengths (ResNet-18 has about 15).
    RowLayout    The device tensors that depend only on (starts, lengths): where each padded
                 slot reads its value, and its key's base (its global index, or PADDING past
                 its unit's end). DEFT's bins repeat (a rank's bin cycles through W of them), so
                 they are cached, least recently used first out, up to CACHED_PER_ELEMENT slots
                 per element of the values (all W bins fit): a cached select spends no
                 operation on them.
"""
from __future__ import annotations

import functools
from collections import OrderedDict
from dataclasses import dataclass

import torch

from sparsifiers.common.kernels.segmented import _spread, _upload
from sparsifiers.common.kernels.selection_model import calibrated

KEY_BYTES = 8  # one int64 key per padded slot
OPS_PER_CLASS = 2  # as_strided, topk (classed_topk.py)
JOIN_OPS = 1  # per class where there are several: a view of its tops (then one cat joins them)
PADDING = torch.iinfo(torch.int64).max  # a padded slot's key base: its key stays above every real one
# Cached padded slots, at most, per element of the values (8-16 bytes each). A rank's bin cycles
# through W of them, and least-recently-used eviction would miss every time if the W did not fit:
# at ResNet-18 they take 1.04, 1.03, 1.17 and 1.95 slots per element at W = 2, 4, 16 and 64.
CACHED_PER_ELEMENT = 4


@functools.cache
def _costs() -> tuple[float, float]:
    """(us per operation, us per ranked byte) of the calibrated selection model (conf/compute_profile/h200.yaml)."""
    model = calibrated("h200")
    assert model.ranking_gbs, "the h200 profile calibrates the ranking ops' throughput"
    return model.launch_us, 1e6 / (model.ranking_gbs * 1e9)


def classes(lengths: list[int]) -> list[list[int]]:
    """The units (indices into `lengths`) by class, shortest class first, each class's units in
    the order given: the grouping of sorted distinct lengths the model reads cheapest (docstring)."""
    launch_us, us_per_byte = _costs()
    distinct = sorted(set(lengths))
    count = [0] * len(distinct)
    where = {length: i for i, length in enumerate(distinct)}
    for length in lengths:
        count[where[length]] += 1
    # best[j]: the cheapest grouping of distinct[:j]; cut[j]: where its last class begins.
    best, cut = [0.0] + [float("inf")] * len(distinct), [0] * (len(distinct) + 1)
    for j in range(1, len(distinct) + 1):
        rows = 0
        for i in range(j - 1, -1, -1):  # the last class holds distinct[i:j], padded to distinct[j - 1]
            rows += count[i]
            cost = best[i] + (OPS_PER_CLASS + JOIN_OPS) * launch_us + rows * distinct[j - 1] * KEY_BYTES * us_per_byte
            if cost < best[j]:
                best[j], cut[j] = cost, i
    bounds, j = [], len(distinct)
    while j:
        bounds.append((cut[j], j))
        j = cut[j]
    single = OPS_PER_CLASS * launch_us + len(lengths) * distinct[-1] * KEY_BYTES * us_per_byte if distinct else 0.0
    if len(bounds) > 1 and single <= best[-1] + launch_us:  # several classes: their views and the cat too
        bounds = [(0, len(distinct))]
    group = {length: g for g, (i, j) in enumerate(reversed(bounds)) for length in distinct[i:j]}
    grouped: list[list[int]] = [[] for _ in bounds]
    for unit, length in enumerate(lengths):
        grouped[group[length]].append(unit)
    return grouped


@dataclass
class RowLayout:
    """The padded rows of one (starts, lengths), class by class (classed_topk.py, steps 1-2)."""

    classes: list[list[int]]  # the units of each class, in row order
    widths: list[int]  # each class's row width
    positions: torch.Tensor  # per padded slot: the element it reads (inside the values)
    base: torch.Tensor  # per padded slot: its key's base, the element's index or PADDING

    @property
    def slots(self) -> int:
        return self.positions.numel()


def _build(values: torch.Tensor, starts: list[int], lengths: list[int]) -> RowLayout:
    """The rows' positions and key bases, in a fixed number of operations (no host sync)."""
    grouped = classes(lengths)
    widths = [max(lengths[u] for u in units) for units in grouped]
    rows = [(u, width) for units, width in zip(grouped, widths) for u in units]
    total = sum(width for _, width in rows)
    shift, limit, width = _upload(values.device, *map(list, zip(*[(starts[u] - place, starts[u] + lengths[u], w)
                                                                 for (u, w), place in zip(rows, _places(rows))])))
    positions = torch.arange(total, device=values.device).add_(_spread(shift, width, total))
    if all(lengths[u] == w for u, w in rows):
        return RowLayout(grouped, widths, positions, positions)
    base = positions.masked_fill(positions >= _spread(limit, width, total), PADDING)
    # The padding's positions read anything inside the values (its key's base keeps it last).
    return RowLayout(grouped, widths, positions.clamp_(max=values.numel() - 1), base)


def _places(rows: list[tuple[int, int]]) -> list[int]:
    """Where each row begins in the padded slots."""
    places, place = [], 0
    for _, width in rows:
        places.append(place)
        place += width
    return places


_CACHE: OrderedDict[tuple, RowLayout] = OrderedDict()


def row_layout(values: torch.Tensor, starts: list[int], lengths: list[int]) -> RowLayout:
    """The RowLayout of (starts, lengths) over `values`' device: cached, else built (docstring)."""
    key = (values.device, values.numel(), tuple(starts), tuple(lengths))
    layout = _CACHE.get(key)
    if layout is not None:
        _CACHE.move_to_end(key)
        return layout
    layout = _build(values, starts, lengths)
    _CACHE[key] = layout
    while sum(cached.slots for cached in _CACHE.values()) > CACHED_PER_ELEMENT * values.numel() and len(_CACHE) > 1:
        _CACHE.popitem(last=False)
    return layout
