"""W sparsifiers driven through phases 2 to 5 (experiments/engine/core/sparsify.py), without a model.

Tests supply each rank's gradient; everything after that is the production code, the hosted
ranks every driver steps (`experiments.engine.core.hosted.HostedRanks`): the step's accumulate rule
(`experiments.engine.core.error_feedback.accumulate`), then `experiments.engine.core.sparsify.sparsify_and_exchange`
(averaged inputs, the leader's plan and its broadcast, select, exchange, residual zeroing,
on_residual_zeroed, observe) over a one-process `RankCollectives`, which simulates W ranks exactly.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import torch

from experiments.engine.core.collectives import RankCollectives
from experiments.engine.core.exchange import ExchangeResult
from experiments.engine.core.hosted import HostedRanks
from experiments.engine.core.world import World
from sparsifiers.common.base import Sparsifier


@dataclass
class SteppedStep:
    step: int
    leader: int | None
    plan: torch.Tensor | None
    selections: list[torch.Tensor | None]  # per rank: sorted int64 copies of what select returned (None: dense)
    accs: list[torch.Tensor]  # per rank: acc as select saw it
    residuals: list[torch.Tensor]  # per rank: after the feedback phase
    aggregate: torch.Tensor
    result: ExchangeResult

    @property
    def counts(self) -> list[int]:
        return [int(c) for c in self.result.counts]

    @property
    def aggregated(self) -> int:
        return self.result.aggregated

    @property
    def zeroed(self) -> list[torch.Tensor | None]:
        return self.result.zeroed


class SteppedRanks:
    """A hosted world of W ranks, one sparsifier each, with residuals kept between steps."""

    def __init__(self, sparsifiers: list[Sparsifier], dtype: torch.dtype = torch.float32, reduction: str = "ring") -> None:
        self.world_size = len(sparsifiers)
        self.numel = sparsifiers[0].numel
        ranks = list(range(self.world_size))
        self.comm = RankCollectives(self.world_size, ranks, use_process_group=False, reduction=reduction)
        self.world = World(self.world_size, 1, 0, ranks, torch.device("cpu"), self.comm)
        self.ranks = HostedRanks(self.world, sparsifiers, torch.zeros(self.numel, dtype=dtype))

    @property
    def sparsifiers(self) -> list[Sparsifier]:
        return self.ranks.sparsifiers

    @property
    def residuals(self) -> list[torch.Tensor]:
        return self.ranks.residuals

    def step(self, grads: list[torch.Tensor], step: int) -> SteppedStep:
        self.comm.meter.reset()
        # 1. acc = precondition(grad) + residual: what the training step does after each backward.
        for index, grad in enumerate(grads):
            self.ranks.accumulate(index, grad)
        before = [acc.clone() for acc in self.residuals]
        outcome = self.ranks.step(step)
        recorded = [None if s is None else torch.sort(s.detach().long()).values.clone() for s in outcome.selections]
        residuals = [residual.clone() for residual in self.residuals]
        kept_plan = None if outcome.plan is None else outcome.plan.clone()
        return SteppedStep(step, outcome.leader, kept_plan, recorded, before, residuals, self.ranks.out.clone(),
                           outcome.result)


def gradients(
    sizes: list[int], world_size: int, step: int, seed: int = 0, dtype: torch.dtype = torch.float32
) -> list[torch.Tensor]:
    """Each rank's gradient at `step`: normal noise, scaled per tensor by a factor that drifts
    with the step, so unit norms differ and their order changes over time."""
    grads = []
    for rank in range(world_size):
        generator = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + rank)
        scales = torch.cat([
            torch.full((size,), 1.0 + 0.8 * float(torch.sin(torch.tensor(0.7 * step + 1.3 * i))) + 0.05 * rank)
            for i, size in enumerate(sizes)
        ])
        grads.append((torch.randn(sum(sizes), generator=generator) * scales).to(dtype))
    return grads


def noise(numel: int, world_size: int, seed: int, scale: torch.Tensor | float = 1.0) -> Iterator[list[torch.Tensor]]:
    """Forever: one fresh gradient per rank, standard normal noise times `scale` (per element)."""
    generator = torch.Generator().manual_seed(seed)
    while True:
        yield [torch.randn(numel, generator=generator) * scale for _ in range(world_size)]


def assert_resume_is_exact(make: Callable[[int], Sparsifier], world_size: int,
                           stream: Iterator[list[torch.Tensor]], warm_steps: int = 20, later_steps: int = 10) -> list[dict]:
    """Runs `warm_steps`, saves every rank's state_dict and residual, runs `later_steps` more;
    a fresh world loaded from the saved state must select the same indices and end in the same
    state. Returns the saved states (for method-specific checks)."""
    world = SteppedRanks([make(r) for r in range(world_size)])
    for t in range(warm_steps):
        world.step(next(stream), t)
    states = [copy.deepcopy(s.state_dict()) for s in world.sparsifiers]
    residuals = [r.clone() for r in world.residuals]
    later = [next(stream) for _ in range(later_steps)]
    expected = [world.step(grads, warm_steps + i).selections for i, grads in enumerate(later)]

    resumed = SteppedRanks([make(r) for r in range(world_size)])
    for sparsifier, state, residual, mine in zip(resumed.sparsifiers, states, residuals, resumed.residuals):
        sparsifier.load_state_dict(state)
        assert sparsifier.state_dict() == state
        mine.copy_(residual)
    for i, grads in enumerate(later):
        got = resumed.step(grads, warm_steps + i).selections
        assert [s.tolist() for s in got] == [s.tolist() for s in expected[i]]
    assert [s.state_dict() for s in resumed.sparsifiers] == [s.state_dict() for s in world.sparsifiers]
    return states


# -- threshold comparisons: the released rule and the exact one (threshold_control.py) -----------
def float32_nearest(value: float) -> float:
    """`value` rounded to the nearest float32, as torch rounds a Python float compared with a
    float32 tensor."""
    return float(np.float32(value))


def passes(magnitude: float, threshold: float, comparison: str) -> bool:
    """Whether a float32 |acc| (as a Python float) is selected by lambda = `threshold`:
    released compares with lambda rounded to the nearest float32, exact with lambda itself."""
    return magnitude >= (float32_nearest(threshold) if comparison == "released" else threshold)


def ties(threshold: float) -> list[float]:
    """float32 values at the cutoff: the float32 nearest to lambda and its two float32
    neighbours, both signs. When nearest rounding goes down, the first two are selected by the
    released comparison only."""
    nearest = np.float32(threshold)
    values = [nearest, np.nextafter(nearest, np.float32(np.inf)), np.nextafter(nearest, np.float32(0))]
    return [float(sign * value) for value in values for sign in (1, -1)]


def inject_ties(grads: list[torch.Tensor], residuals: list[np.ndarray], threshold: float,
                generator: np.random.Generator, limit: int | None = None, per_rank: int = 6) -> None:
    """Sets `per_rank` entries of each rank's gradient (in place) to `ties(threshold)`, at
    positions below `limit` where the rank's residual is exactly 0, so that acc = residual +
    grad lands exactly on the tie."""
    values = ties(threshold)
    for grad, residual in zip(grads, residuals):
        free = np.flatnonzero(residual[:limit] == 0)
        positions = generator.choice(free, size=min(per_rank, free.size), replace=False)
        for i, position in enumerate(positions):
            grad[int(position)] = values[i % len(values)]
