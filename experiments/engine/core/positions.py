"""Where in the gradient vector a step's coordinates lie: two histograms over `bins` equal bins of
the N coordinates, logged on logging steps when `position_bins` > 0.

- positions: how many coordinates of the aggregate U fall in each bin (the aggregate's nonzero
  entries: every rank holds the same aggregate, so no communication is needed);
- energy: the sum of rank 0's squared accumulator entries in each bin, before its selection.

The end-to-end model (experiments/studies/endtoend/structure.py) replays the split methods' own partition
rules on them to predict each rank's count at worker counts no machine here can host: MiCRO's and
ExDyna's partitions hold the positions that fall in them, and DEFT's per-unit k comes from unit
norms, the square root of the energy in each unit.
"""
from __future__ import annotations

import torch


def bin_edges(numel: int, bins: int) -> list[int]:
    """The bins + 1 element boundaries: bin b is [b N // bins, (b + 1) N // bins); at most N bins."""
    bins = min(bins, numel)
    return [b * numel // bins for b in range(bins + 1)]


def _sums_per_bin(values: torch.Tensor, edges: list[int]) -> list[float]:
    # Each bin summed on its own (a running sum read at the edges would lose a small bin's
    # energy beside a large total).
    lengths = torch.tensor([end - start for start, end in zip(edges, edges[1:])], device=values.device)
    return torch.segment_reduce(values.to(torch.float64), "sum", lengths=lengths).cpu().tolist()


def position_counts(aggregate: torch.Tensor, bins: int) -> list[int]:
    """How many nonzero entries of `aggregate` (the coordinates of U) lie in each bin."""
    edges = bin_edges(aggregate.numel(), bins)
    return [round(count) for count in _sums_per_bin(aggregate != 0, edges)]


def energy(acc: torch.Tensor, bins: int) -> list[float]:
    """The sum of acc's squared entries in each bin."""
    return _sums_per_bin(acc.double().square(), bin_edges(acc.numel(), bins))
