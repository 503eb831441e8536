"""The split methods' per-rank counts at any W, replayed from where their coordinates lay.

A hosted run with `position_bins` > 0 logs, on every logging step, two histograms over equal bins
of the N coordinates (experiments/engine/core/positions.py): the positions of U, and the energy (sum of
squares) of rank 0's accumulator. What a split method's busiest rank sends at another W follows
from its own partition rule applied to them, run with the method's own code:

- MiCRO: W contiguous partitions (even_splits); a partition's count is the positions in it.
- ExDyna: B blocks; the partitions start even and move block by block with ExDyna's
  `move_blocks`, replayed step by step on the logged positions (a logging step's histogram stands
  for the steps until the next); the last partition also holds the remainder.
- DEFT: the units at W (make_units), unit norms from the energy in each unit, k per unit
  (unit_k), the common units, the leader's allocation (allocate): |U| is the sum of k_l plus the
  common units, k_max the fullest bin, the plan as encode_plan writes it (W + 1 + the units).

Within a bin the histograms are taken as uniform (a boundary inside a bin takes its share). Each
statistic is the median over the logged steps of the window [settle, until), as the measured ones
are (experiments/studies/endtoend/runs.py). The replay keeps a run's threshold and accumulators as they
were at its own W; that the partitions, not those, are what changes with W is what
`python -m experiments.studies.endtoend.check` tests.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import numpy as np

from experiments.engine.core.positions import bin_edges
from sparsifiers.common.deft_allocation import allocate, common_units, encode_plan, make_units, unit_cost, unit_k
from sparsifiers.exdyna import move_blocks
from sparsifiers.common.layout import Layout, even_splits
from sparsifiers.registry import chosen, names

# The methods whose runs are replayed at other W: each rank selects in its own partition, by a
# rule this module runs (Structure.at). Another partitioned method (a user's own, registered
# through SPARSEBENCH_METHODS) has no rule here: its statistics are fitted like any method's.
REPLAYED = chosen("micro", "exdyna", "deft")
SPLIT_METHODS = tuple(name for name in names(partitioned=True) if name in REPLAYED)


@dataclass(frozen=True)
class Histograms:
    """One logging step's histograms (experiments/engine/core/positions.py)."""

    step: int
    positions: np.ndarray
    energy: np.ndarray


def _cumulative(values: np.ndarray) -> np.ndarray:
    return np.concatenate(([0.0], np.cumsum(values, dtype=np.float64)))


def masses(edges: np.ndarray, cumulative: np.ndarray, boundaries: list[int]) -> np.ndarray:
    """What the histogram holds between consecutive `boundaries` (element positions), each bin
    taken as uniform."""
    return np.maximum(np.diff(np.interp(np.asarray(boundaries, dtype=np.float64), edges, cumulative)), 0.0)


@dataclass(frozen=True)
class Structure:
    """A split method's replayed statistics (module docstring), from one hosted run."""

    method: str  # the sparsifier class: micro | exdyna | deft
    numel: int
    k: int
    rows: tuple[Histograms, ...]  # every logged train step with histograms, in step order
    settle: int
    until: int
    knobs: dict  # the run's sparsifier description (ExDyna's blocks, DEFT's common_units)
    tensor_numels: tuple[int, ...]
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def window(self) -> list[Histograms]:
        rows = [r for r in self.rows if self.settle <= r.step < self.until]
        return rows or list(self.rows[-1:])

    @property
    def edges(self) -> np.ndarray:
        return np.asarray(bin_edges(self.numel, len(self.rows[0].positions)), dtype=np.float64)

    def at(self, workers: int) -> dict[str, float]:
        """k_max at `workers` (and DEFT's |U| and plan length): the medians over the window."""
        if workers not in self._cache:
            replay = {"micro": self._micro, "exdyna": self._exdyna, "deft": self._deft}[self.method]
            self._cache[workers] = replay(workers)
        return self._cache[workers]

    def _micro(self, workers: int) -> dict[str, float]:
        boundaries, edges = [0] + [end for _, end in even_splits(self.numel, workers)], self.edges
        k_max = [max(1.0, float(masses(edges, _cumulative(r.positions), boundaries).max())) for r in self.window]
        return {"k_max": statistics.median(k_max)}

    def _exdyna(self, workers: int) -> dict[str, float]:
        blocks, block_size = int(self.knobs["blocks"]), int(self.knobs["block_size"])  # as the run cut them
        if workers > blocks:
            raise ValueError(f"exdyna cannot run W = {workers} workers on B = {blocks} blocks")
        partition_blocks = [end - start for start, end in even_splits(blocks, workers)]
        edges, window = self.edges, {r.step for r in self.window}
        rows = iter(self.rows)
        row, upcoming = next(rows), next(rows, None)
        k_max = []
        for step in range(max(window) + 1):
            while upcoming is not None and upcoming.step <= step:
                row, upcoming = upcoming, next(rows, None)
            cumulative = _cumulative(row.positions)
            boundaries = [0, *(block_size * b for b in np.cumsum(partition_blocks)[:-1]), self.numel]
            counts = masses(edges, cumulative, boundaries)
            if step in window:
                k_max.append(max(1.0, float(counts.max())))
            aggregated = int(round(cumulative[-1]))
            move_blocks(partition_blocks, [int(c) for c in counts], aggregated, block_size, self.numel, blocks)
        return {"k_max": statistics.median(k_max)}

    def _deft(self, workers: int) -> dict[str, float]:
        layout = Layout.from_shapes((str(i), (n,)) for i, n in enumerate(self.tensor_numels))
        units = make_units(layout, workers)
        sizes = [end - start for start, end in units]
        boundaries = [units[0][0]] + [end for _, end in units]
        unions, k_maxes, plan = [], [], 0
        for row in self.window:
            energies = masses(self.edges, _cumulative(row.energy), boundaries)
            ks = unit_k([math.sqrt(e) for e in energies], sizes, self.k)
            common = common_units(ks, sizes)
            assignment = allocate([unit_cost(s, k) for s, k in zip(sizes, ks)], common, workers)
            counts = [sum(ks[u] for u in units_of_bin) for units_of_bin in assignment]
            whole = sum(sizes[u] for u in common)
            if self.knobs.get("common_units") == "leader":  # the leader's selection carries them
                leader = row.step % workers
                counts[(row.step + leader) % workers] += whole
            unions.append(sum(counts) + (whole if self.knobs.get("common_units") != "leader" else 0))
            k_maxes.append(max(counts))
            plan = encode_plan(assignment, common).numel()  # W + 1 + every unit, whatever the data
        return {"k_max": statistics.median(k_maxes), "union": statistics.median(unions), "plan": float(plan)}


def structure_of(method: str, numel: int, k: int, rows: list[Histograms], settle: int, until: int, knobs: dict,
                 tensor_numels: tuple[int, ...]) -> Structure | None:
    """The replay of a split method's run, or None when it cannot be replayed (another method, a
    run logged without position_bins, or DEFT without its layout)."""
    if method not in SPLIT_METHODS or not rows or (method == "deft" and not tensor_numels):
        return None
    return Structure(method, numel, k, tuple(sorted(rows, key=lambda r: r.step)), settle, until, knobs, tensor_numels)
