"""Random-k: k coordinates drawn uniformly, the same on every rank.

    1. Stream: a counter-based generator (splitmix64 over int64 torch ops, identical on every
       device): the t-th step's draws are a pure function of the run seed and t, so every rank,
       CPU or GPU, draws the same numbers, a resumed run the same as one never stopped, and the
       training RNG is never touched.
    2. Draw (every step): k distinct indices, uniform over all k-subsets of [0, N).
    3. Exchange: shared_allreduce. The indices are identical everywhere by construction, so no
       index travels: the values there are allreduced. No build-up, no selection cost beyond the draw.

The draw runs on the accumulator's device in a fixed number of ops (issue #36; it used to draw on
the CPU with torch's generator and copy the indices over, 4x a top-k on a GPU). For k <= N / 2:
m = k + a margin iid uniform draws u_0, u_1, ... (64-bit hashes of (seed, t, i), reduced mod N),
one sort of (value, draw position) pairs finds each value's first appearance, and the k values
that appear first are kept (in value order, found by a k-th smallest and a prefix sum, no sort): the distinct values of an iid uniform sequence, in order of first appearance, are a
uniformly random sequence without repetition, so the k kept are a uniform k-subset (up to the
bias of reducing 53 random bits mod N, below N / 2^53). One host sync checks that the m draws
held k distinct values (the margin makes a shortfall rare; then m doubles, the same prefix).
For k > N / 2: a hash per coordinate, and the k coordinates of smallest hash (a stable sort:
ties, rare, by lower index). Which indices a seed draws changed with this sampler (before: torch's
CPU generator); the distribution did not.
"""
from __future__ import annotations

from typing import Any

import math

import numpy as np
import torch

from sparsifiers.common.base import SelectionScope, Sparsifier
from sparsifiers.common.exchange_kinds import ExchangeKind
from sparsifiers.common.layout import Layout

INDEX_STREAM = 0x52414E44  # separates Random-k's stream from every other seeded stream


def shared_seed(seed: int) -> int:
    """The seed of the index generator every rank of a run seeded with `seed` shares."""
    return int(np.random.SeedSequence([seed, INDEX_STREAM]).generate_state(1)[0])


MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15  # splitmix64's increment
MIX = (0xBF58476D1CE4E5B9, 0x94D049BB133111EB)  # splitmix64's multipliers
SHIFTS = (30, 27, 31)


def _signed(value: int) -> int:
    """A 64-bit pattern as the int64 torch stores."""
    value &= MASK64
    return value - (1 << 64) if value >> 63 else value


def mix_int(value: int) -> int:
    """splitmix64's finalizer on a Python int (the per-step key, computed on the host)."""
    for shift, multiplier in zip(SHIFTS, MIX + (None,)):
        value ^= (value & MASK64) >> shift
        if multiplier is not None:
            value = (value * multiplier) & MASK64
    return value & MASK64


def mix(x: torch.Tensor) -> torch.Tensor:
    """splitmix64's finalizer on int64 tensors, in place: wrapping multiplies, logical shifts (an
    arithmetic shift masked), so every device computes the same bits as `mix_int`."""
    for shift, multiplier in zip(SHIFTS, MIX + (None,)):
        x.bitwise_xor_(x.bitwise_right_shift(shift).bitwise_and_((1 << (64 - shift)) - 1))
        if multiplier is not None:
            x.mul_(_signed(multiplier))
    return x


def hashes(key: int, count: int, device: torch.device) -> torch.Tensor:
    """The first `count` outputs of the stream `key`: mix(key + (i + 1) * GOLDEN), int64."""
    x = torch.arange(1, count + 1, dtype=torch.int64, device=device).mul_(_signed(GOLDEN)).add_(_signed(key))
    return mix(x)


def kth_smallest(values: torch.Tensor, k: int) -> torch.Tensor:
    """The k-th smallest of 1-D `values` (1-based, as `torch.kthvalue`'s value, ties included).
    Not kthvalue itself: on a 1-D CUDA tensor it runs as one thread block, far slower than
    topk's radix select; the k smallest's largest is the same value, bit for bit."""
    return torch.topk(values, k, largest=False, sorted=False).values.max()


class RandomK(Sparsifier):
    """Random-k with error feedback: identical uniform indices on every rank from a shared seed."""

    name = "randomk"
    scope = SelectionScope.WHOLE
    exchanges = (ExchangeKind.SHARED_ALLREDUCE,)

    def __init__(self, layout: Layout, world_size: int, rank: int, density: float, **knobs) -> None:
        super().__init__(layout, world_size, rank, density=density, **knobs)
        # 1. Stream: the same seed on every rank.
        self._seed = shared_seed(self.seed)

    def _key(self, step: int) -> int:
        """The stream of step `step` (its own splitmix64 sequence)."""
        return mix_int(mix_int(self._seed) ^ mix_int((step + 1) * GOLDEN))

    def _draw_sparse(self, step: int, device: torch.device) -> torch.Tensor:
        """k distinct uniform indices for k <= N / 2 (module docstring), allocating O(k)."""
        k, n = self.k, self.numel
        collisions = k * k / n  # about twice the expected repeats among k draws
        draws = k + math.ceil(collisions + 8 * math.sqrt(collisions)) + 16
        while True:
            # 53 bits of each hash, reduced mod N; then one sort of (value, draw position) pairs,
            # packed as value * draws + position (below 2^63 while N < 3e9).
            values = hashes(self._key(step), draws, device).bitwise_right_shift_(11).remainder_(n)
            ordered = torch.sort(values.mul_(draws).add_(torch.arange(draws, device=device))).values
            value = torch.div(ordered, draws, rounding_mode="floor")
            first = torch.ones(draws, dtype=torch.bool, device=device)  # each value's first appearance
            torch.ne(value[1:], value[:-1], out=first[1:])
            if int(first.sum()) >= k:  # the one host sync
                break
            draws *= 2  # rare: the same stream, longer
        # The k values that appeared first: draw positions at most the k-th smallest first one
        # (positions are distinct), written out in value order without another sort.
        appeared = torch.where(first, ordered.sub_(value * draws), draws)
        kept = appeared <= kth_smallest(appeared, k)
        slots = torch.where(kept, kept.cumsum(0).sub_(1), k)  # the rest go to a spare slot
        return torch.empty(k + 1, dtype=torch.int64, device=device).scatter_(0, slots, value)[:k]

    def _draw_dense(self, step: int, device: torch.device) -> torch.Tensor:
        """k distinct uniform indices for k > N / 2: the k coordinates of smallest hash."""
        keys = hashes(self._key(step), self.numel, device)
        return torch.sort(torch.sort(keys, stable=True).indices[: self.k]).values

    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> torch.Tensor:
        # 2. Draw: sorted, so the exchange gathers memory in order.
        if 2 * self.k <= self.numel:
            return self._draw_sparse(step, acc.device)
        return self._draw_dense(step, acc.device)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "index_seed": shared_seed(self.seed), "sampler": "splitmix64"}
