"""DEFT's planning arithmetic (docs/algorithms.md, DEFT steps 1 to 3), pure and tensor-free so that
tests can check it alone: units, per-unit k, costs, largest-first bin packing, and the wire
format of the leader's plan.

A unit is a half-open range [start, end) of global indices into the flat buffer.
"""
from __future__ import annotations

import heapq
import math

import torch

from sparsifiers.common.layout import Layout, even_splits

Unit = tuple[int, int]


def make_units(layout: Layout, world_size: int) -> list[Unit]:
    """Step 1: walk the tensors in order; one with more than N / W elements is cut into W
    contiguous pieces whose sizes differ by at most one (the first N mod W one larger), every
    other tensor is one unit. Empty tensors and empty pieces (a tensor smaller than W) are
    skipped: a unit of size 0 could not hold the k_l >= 1 that step 2 gives every unit."""
    numel, units = layout.numel, []
    for segment in layout.segments:
        # numel * W > N is "more than N / W elements" without a float division.
        pieces = even_splits(segment.numel, world_size) if segment.numel * world_size > numel else [(0, segment.numel)]
        units += [(segment.offset + start, segment.offset + end) for start, end in pieces if end > start]
    return units


def unit_k(norms: list[float], sizes: list[int], k: int) -> list[int]:
    """Step 2: visit units by decreasing norm (ties: lower unit first), keeping the remaining k
    and the remaining norm sum; k_l = floor(remaining_k * norm_l / remaining_norm) (0 once the
    remaining norm is 0), capped at the unit size, raised to at least 1, then subtracted.

    So sum(k_l) = k, except that raising to 1 adds at most one per unit, a cap at the last
    units visited can lose what no later unit absorbs, and the running float difference of the
    remaining norm can leave the last floor() one short. The arithmetic is in Python floats
    (double); the paper's 11,172 of 11,173 on ResNet-18 suggests the released code's is float32."""
    order = sorted(range(len(norms)), key=lambda unit: (-norms[unit], unit))
    remaining_k, remaining_norm = k, sum(norms)
    ks = [0] * len(norms)
    for unit in order:
        share = math.floor(remaining_k * norms[unit] / remaining_norm) if remaining_norm > 0 else 0
        ks[unit] = max(1, min(sizes[unit], share))
        remaining_k -= ks[unit]
        remaining_norm -= norms[unit]
    return ks


def unit_cost(size: int, k: int) -> float:
    """Step 3's cost model: a top-k over `size` elements costs size * log2(k) (size if k <= 1)."""
    return size * math.log2(k) if k > 1 else float(size)


def common_units(ks: list[int], sizes: list[int]) -> list[int]:
    """Units whose k_l equals their size: sent whole, never selected, no load (step 3)."""
    return [unit for unit, (k, size) in enumerate(zip(ks, sizes)) if k == size]


def allocate(costs: list[float], excluded: list[int], bins: int) -> list[list[int]]:
    """Step 3: greedy largest-cost-first; each unit goes to the bin of least load (ties: lowest
    bin, and among equal costs the lower unit goes first). `excluded` units (common) get no bin.
    Within 4/3 - 1/(3 * bins) of the optimal largest load (Graham's LPT bound)."""
    skip = set(excluded)
    order = sorted((unit for unit in range(len(costs)) if unit not in skip), key=lambda unit: (-costs[unit], unit))
    loads = [(0.0, b) for b in range(bins)]  # a heap of (load, bin): pops the least, lowest bin first
    assignment: list[list[int]] = [[] for _ in range(bins)]
    for unit in order:
        load, b = heapq.heappop(loads)
        assignment[b].append(unit)
        heapq.heappush(loads, (load + costs[unit], b))
    return assignment


def bin_loads(assignment: list[list[int]], costs: list[float]) -> list[float]:
    return [sum(costs[unit] for unit in units) for units in assignment]


def encode_plan(assignment: list[list[int]], common: list[int]) -> torch.Tensor:
    """The leader's broadcast: W bin sizes, the number of common units, then the W unit lists
    and the common units, all int64 (the world broadcasts 1-D int64 tensors)."""
    header = [len(units) for units in assignment] + [len(common)]
    body = [unit for units in assignment for unit in units] + list(common)
    return torch.tensor(header + body, dtype=torch.int64)


def decode_plan(plan: list[int], bins: int) -> tuple[list[list[int]], list[int]]:
    """Inverse of `encode_plan`; raises ValueError on a malformed plan."""
    sizes = plan[: bins + 1]
    if len(sizes) != bins + 1 or len(plan) != bins + 1 + sum(sizes):
        raise ValueError(f"malformed DEFT plan for {bins} bins: header {sizes}, length {len(plan)}")
    lists, position = [], bins + 1
    for size in sizes:
        lists.append(plan[position : position + size])
        position += size
    return lists[:bins], lists[bins]
