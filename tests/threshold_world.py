"""W ranks of one threshold-family sparsifier in one process, for the micro, exdyna and threshold
method tests: the real exchange and the residual rule of experiments/step.py.

One step: acc_r = grad_r + residual_r; S_r = select(acc_r, t); `experiments.exchange.exchange` of
the method's kind through `RankCollectives(W, list(range(W)), use_process_group=False)`; the
residual loses what the exchange says this rank transmitted; every rank observes one `Feedback`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from experiments.collectives import RankCollectives
from experiments.exchange import exchange
from sparsifiers.base import Feedback, Sparsifier


@dataclass
class WorldStep:
    selections: list[torch.Tensor]  # per rank: sorted int64 copies of what select returned
    accs: list[torch.Tensor]  # per rank: acc as select saw it
    residuals: list[torch.Tensor]  # per rank: after the exchange
    zeroed: list[torch.Tensor | None]  # per rank: what the exchange says was transmitted
    counts: list[int]
    aggregated: int


class ThresholdWorld:
    """Sparsifiers of ranks 0..W-1 (in order), their residuals, and the exchange between them."""

    def __init__(self, sparsifiers: list[Sparsifier]) -> None:
        self.sparsifiers = sparsifiers
        self.world_size = len(sparsifiers)
        self.comm = RankCollectives(self.world_size, list(range(self.world_size)), use_process_group=False)
        self.residuals = [torch.zeros(sparsifiers[0].numel) for _ in sparsifiers]
        self.out = torch.zeros(sparsifiers[0].numel)

    def step(self, grads: list[torch.Tensor], t: int) -> WorldStep:
        for residual, grad in zip(self.residuals, grads):
            residual.add_(grad)
        accs = [residual.clone() for residual in self.residuals]
        raw = [s.select(residual, t) for s, residual in zip(self.sparsifiers, self.residuals)]
        selections = [torch.sort(selection.long()).values for selection in raw]  # select may reuse buffers
        result = exchange(self.sparsifiers[0].exchange, raw, self.residuals, self.out, self.comm)
        for sparsifier, residual, zeroed in zip(self.sparsifiers, self.residuals, result.zeroed):
            if zeroed is None or not sparsifier.error_feedback:
                residual.zero_()
            else:
                residual[zeroed] = 0
        feedback = Feedback(step=t, counts=result.counts, aggregated=result.aggregated)
        for sparsifier in self.sparsifiers:
            sparsifier.observe(feedback)
        return WorldStep(selections, accs, [r.clone() for r in self.residuals], result.zeroed,
                         [int(c) for c in result.counts], result.aggregated)


def noise(numel: int, world_size: int, seed: int, scale: torch.Tensor | float = 1.0) -> Iterator[list[torch.Tensor]]:
    """Forever: one fresh gradient per rank, standard normal noise times `scale` (per element)."""
    generator = torch.Generator().manual_seed(seed)
    while True:
        yield [torch.randn(numel, generator=generator) * scale for _ in range(world_size)]
