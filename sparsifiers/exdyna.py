"""ExDyna: MiCRO's threshold over partitions that follow the gradient (arXiv 2402.13781).

MiCRO's static partitions give a rank with a dense region of large gradients many more indices
than the others, and the index allgather pads every rank to the largest count. ExDyna cuts the
vector into blocks and moves partition boundaries block by block toward equal counts.

    1. Blocks (once): B blocks of floor(N / B) elements rounded down to a multiple of 32
       (`block_align`); the remainder goes to the last partition. Partition p owns a contiguous
       run of blocks, initially as even as possible (the first B mod W one block larger). The
       minimum partition is B / (4 W) blocks.
    2. Dynamic allocation (before every step t >= 1, from step t - 1's feedback, identical on all
       ranks, so it runs in `observe`): the step's per-rank counts
       are mapped to the partitions they scanned; mean = floor(|U| / W). Sweeping the boundaries
       left to right: if partition i is above 1.05 x mean and i+1 below mean / 1.05, one block
       moves from i to i+1; in the mirror case from i+1 to i; never below the minimum. After a
       move, the estimated counts shift by floor(block size x |U| / N) (the previous density)
       before the next boundary is tested.
    3. Assignment and selection: rank r takes partition (t + r) mod W and selects |acc| >= lambda
       there; if none, the single index partition start + (t mod partition size). `comparison`:
       released (lambda rounded to the nearest float32, as the released code compares) or exact
       (threshold_control.py).
    4. Threshold: MiCRO's rule (threshold_control.py; `threshold_rule` official or symmetric),
       from 1 / (2 sqrt(k)); `threshold_start: calibrated` (not the released code) starts instead
       at the mean over ranks of each rank's k-th largest |acc| at t = 0, through the averaged
       inputs (threshold_start.py: why that estimate makes |U| ~ k over the step-0 partitions too).
    5. Exchange: union_allreduce. Load imbalance W * max count / sum of counts - 1 (the padding
       the index allgather pays) is logged by the shared metrics as selection/load_imbalance.

Small models: when floor(N / B) < block_align the alignment is dropped (block size floor(N / B))
rather than leaving every block empty, as the released code would (its block size becomes 0 and
the last partition holds everything). B must satisfy W <= B <= N.
"""
from __future__ import annotations

import math
from itertools import accumulate
from typing import Any

import torch

from experiments.runformat import metric_keys as keys
from experiments.runformat.errors import ConfigError
from sparsifiers.common.base import SelectionScope, Sparsifier
from sparsifiers.common.exchange_kinds import ExchangeKind, Feedback
from sparsifiers.common.layout import Layout, even_splits
from sparsifiers.common.threshold_control import ThresholdScan, check_comparison, check_threshold_rule, next_threshold
from sparsifiers.common.threshold_start import ThresholdStart

SURPLUS = 1.05  # a partition above SURPLUS x mean gives a block to a neighbour below mean / SURPLUS


class ExDyna(Sparsifier):
    """ExDyna with error feedback: block-granular dynamic partitions, MiCRO's global threshold."""

    name = "exdyna"
    scope = SelectionScope.SPLIT
    exchanges = (ExchangeKind.UNION_ALLREDUCE,)
    shared_state = (
        keys.THRESHOLD, keys.PARTITION_BOUNDARIES, keys.BLOCKS_MOVED, keys.BLOCK_SIZE,
    )

    def __init__(
        self,
        layout: Layout,
        world_size: int,
        rank: int,
        density: float,
        blocks: int = 1024,
        block_align: int = 32,
        threshold_rule: str = "official",
        comparison: str = "released",
        threshold_start: str = "released",
        **knobs,
    ) -> None:
        super().__init__(layout, world_size, rank, density=density, **knobs)
        self.threshold_rule = check_threshold_rule(threshold_rule)
        self.comparison = check_comparison(comparison)
        self._start = ThresholdStart(threshold_start, self.k)
        self.threshold_start = threshold_start
        if not isinstance(blocks, int) or blocks < world_size:
            raise ConfigError(
                f"sparsifier.blocks (B) must be >= workers (W = {world_size}), got {blocks}: raise sparsifier.blocks"
            )
        if blocks > self.numel:
            raise ConfigError(
                f"sparsifier.blocks (B) must be <= N = {self.numel} gradient elements, got {blocks}: "
                f"lower sparsifier.blocks"
            )
        if not isinstance(block_align, int) or block_align < 1:
            raise ConfigError(f"sparsifier.block_align must be an integer >= 1, got {block_align}: e.g. 32")
        self.blocks = blocks
        # 1. Blocks (once).
        per_block = self.numel // blocks
        self.block_align = block_align if per_block >= block_align else 1
        self.block_size = per_block - per_block % self.block_align
        self.remainder = self.numel - self.block_size * blocks
        self.partition_blocks = [end - start for start, end in even_splits(blocks, world_size)]
        # 4. Threshold at t = 0 (what the next select uses): NaN until a calibrated start is known.
        self.threshold = math.nan if self._start.pending else self._start.initial
        self._moved = 0  # blocks that crossed a boundary in the last allocation
        # What the last select used, for metrics: threshold, block boundaries, elements, moves.
        self._used = {"threshold": math.nan, "boundaries": self.boundaries(), "scanned": 0, "moved": 0}
        self._scan = ThresholdScan(comparison=self.comparison)

    # -- partitions ----------------------------------------------------------------------------
    def boundaries(self) -> list[int]:
        """Block boundaries of the partitions: W + 1 values from 0 to B."""
        return [0, *accumulate(self.partition_blocks)]

    def element_range(self, partition: int) -> tuple[int, int]:
        """(start, end) elements of a partition; the last one also holds the remainder."""
        first = sum(self.partition_blocks[:partition])
        start = first * self.block_size
        end = (first + self.partition_blocks[partition]) * self.block_size
        return start, end + (self.remainder if partition == self.world_size - 1 else 0)

    def minimum_allows_shrinking(self, partition: int) -> bool:
        """True if the partition keeps at least B / (4 W) blocks after giving one away."""
        return keeps_minimum(self.partition_blocks, partition, self.blocks)

    # -- threshold_start=calibrated: the world averages the first step's k-th largest |acc| ----
    def averaged_inputs(self, acc: torch.Tensor, step: int) -> torch.Tensor | None:
        return self._start.contribution(acc)

    def receive_average(self, mean: torch.Tensor, step: int) -> None:
        self.threshold = self._start.calibrate(mean)

    # -- selection -----------------------------------------------------------------------------
    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> torch.Tensor:
        if self._start.pending:
            raise RuntimeError("sparsifier.threshold_start=calibrated: the world did not average the first step's "
                               "k-th largest |acc| before select (averaged_inputs/receive_average were not called)")
        # 3. Assignment: a permutation of the partitions at every step.
        start, end = self.element_range((step + self.rank) % self.world_size)
        # One comparison pass over the partition.
        selected = self._scan.select(acc[start:end], self.threshold, start)
        if selected.numel() == 0:
            # As the released code does: one rotating index, so no rank ever sends an empty row.
            selected = torch.tensor([start + step % (end - start)], dtype=torch.int64, device=acc.device)
        self._used = {
            "threshold": self.threshold, "boundaries": self.boundaries(), "scanned": end - start, "moved": self._moved,
        }
        return selected

    # -- after the exchange --------------------------------------------------------------------
    def observe(self, feedback: Feedback) -> None:
        # 4. Threshold for the next step (MiCRO's rule on |U|).
        self.threshold = next_threshold(self.threshold, feedback.aggregated, self.k, self.threshold_rule)
        # 2. Partitions for the next step.
        self._moved = self._reallocate(feedback.counts.tolist(), feedback.aggregated, feedback.step)

    def _reallocate(self, counts: list[int], aggregated: int, step: int) -> int:
        """2. Dynamic allocation from one step's counts; returns how many blocks moved."""
        workers = self.world_size
        estimated = [0] * workers
        for rank, count in enumerate(counts):
            estimated[(step + rank) % workers] = int(count)  # the partition rank r scanned
        return move_blocks(self.partition_blocks, estimated, aggregated, self.block_size, self.numel, self.blocks)

    # -- reporting and resume ------------------------------------------------------------------
    def metrics(self) -> dict[str, float | list[float]]:
        return {
            keys.THRESHOLD: self._used["threshold"],
            keys.PARTITION_BOUNDARIES: list(self._used["boundaries"]),
            keys.BLOCKS_MOVED: float(self._used["moved"]),
            keys.BLOCK_SIZE: float(self.block_size),
            keys.SCANNED: float(self._used["scanned"]),
        }

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "threshold_rule": self.threshold_rule,
            "comparison": self.comparison,
            **self._start.describe(),
            "blocks": self.blocks,
            "block_size": self.block_size,
            "block_align": self.block_align,
            "remainder": self.remainder,
            "min_partition_blocks": self.blocks / (4 * self.world_size),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "partition_blocks": list(self.partition_blocks),
            "moved": self._moved,
            "used": {**self._used, "boundaries": list(self._used["boundaries"])},
            **self._start.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        start_keys = set(self._start.state_dict())
        needed = {"threshold", "partition_blocks", "moved", "used"} | start_keys
        if set(state) != needed:
            raise ValueError(f"exdyna state needs {', '.join(sorted(needed))}; got {sorted(state)}")
        blocks = [int(b) for b in state["partition_blocks"]]
        if len(blocks) != self.world_size or sum(blocks) != self.blocks:
            raise ValueError(f"exdyna state holds {len(blocks)} partitions of {sum(blocks)} blocks, "
                             f"expected {self.world_size} of {self.blocks}")
        self._start.load_state_dict({key: state[key] for key in start_keys})
        self.threshold = float(state["threshold"])
        self.partition_blocks = blocks
        self._moved = int(state["moved"])
        used = state["used"]
        self._used = {
            "threshold": float(used["threshold"]),
            "boundaries": [int(b) for b in used["boundaries"]],
            "scanned": int(used["scanned"]),
            "moved": int(used["moved"]),
        }


def keeps_minimum(partition_blocks: list[int], partition: int, blocks: int) -> bool:
    """True if `partition` keeps at least B / (4 W) blocks after giving one away."""
    return 4 * len(partition_blocks) * (partition_blocks[partition] - 1) >= blocks


def move_blocks(partition_blocks: list[int], estimated: list[int], aggregated: int, block_size: int, numel: int,
                blocks: int) -> int:
    """2. Dynamic allocation, one sweep over the boundaries: moves blocks between neighbouring
    partitions of `partition_blocks` (in place) from each partition's count at the last step
    (`estimated`, in partition order) and |U| (`aggregated`); returns how many blocks moved. A
    function of its arguments alone, so the end-to-end model replays it at any W
    (experiments/studies/endtoend/structure.py)."""
    estimated = list(estimated)
    workers = len(partition_blocks)
    mean = aggregated // workers
    shift = block_size * aggregated // numel  # block size x previous density, floored
    moved = 0
    for i in range(workers - 1):
        if estimated[i] > SURPLUS * mean and estimated[i + 1] < mean / SURPLUS:
            giver, taker = i, i + 1
        elif estimated[i] < mean / SURPLUS and estimated[i + 1] > SURPLUS * mean:
            giver, taker = i + 1, i
        else:
            continue
        if not keeps_minimum(partition_blocks, giver, blocks):
            continue
        partition_blocks[giver] -= 1
        partition_blocks[taker] += 1
        estimated[giver] -= shift
        estimated[taker] += shift
        moved += 1
    return moved
