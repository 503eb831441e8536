"""W sparsifiers driven through every phase of experiments/step.py, without a model.

Unlike tests/simulated_ranks.py (select and exchange only), this world also runs the hooks that
DEFT, CLT-k and DGC need: precondition, the leader's plan and its broadcast, on_residual_zeroed.

Tests supply each rank's gradient; everything after that is the real machinery: one-process
`RankCollectives` (which simulates W ranks exactly), the leader plan's broadcast, and
`experiments.exchange.exchange`. One addition models a proposed protocol hook (DEFT's
norms=global): before the plan, each rank's `averaged_inputs(acc, step)` is summed in rank
order, allreduced (metered) and divided by W, and handed to every rank's `receive_average`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from experiments.collectives import RankCollectives
from experiments.exchange import INDEX_DTYPE, ExchangeResult, exchange
from sparsifiers.base import Feedback, Sparsifier


@dataclass
class SteppedStep:
    step: int
    leader: int | None
    plan: torch.Tensor | None
    selections: list[torch.Tensor]  # per rank: sorted int64 copies of what select returned
    accs: list[torch.Tensor]  # per rank: acc as select saw it
    residuals: list[torch.Tensor]  # per rank: after the feedback phase
    aggregate: torch.Tensor
    result: ExchangeResult


class SteppedRanks:
    """A hosted world of W ranks, one sparsifier each, with residuals kept between steps."""

    def __init__(self, sparsifiers: list[Sparsifier], dtype: torch.dtype = torch.float32) -> None:
        self.sparsifiers = sparsifiers
        self.world_size = len(sparsifiers)
        self.numel = sparsifiers[0].numel
        self.comm = RankCollectives(self.world_size, list(range(self.world_size)), use_process_group=False)
        self.residuals = [torch.zeros(self.numel, dtype=dtype) for _ in sparsifiers]

    def step(self, grads: list[torch.Tensor], step: int) -> SteppedStep:
        self.comm.meter.reset()
        # 1. acc = precondition(grad) + residual
        for sparsifier, residual, grad in zip(self.sparsifiers, self.residuals, grads):
            residual.add_(sparsifier.precondition(grad))
        accs = self.residuals
        self._average(accs, step)
        # 2. the leader's plan, broadcast
        leader, plan = self.sparsifiers[0].plan_leader(step), None
        if leader is not None:
            mine = self.sparsifiers[leader].make_plan(accs[leader], step)
            # As experiments/step.py: plans travel as int32 and arrive as int64.
            plan = self.comm.broadcast(mine, leader, INDEX_DTYPE, accs[0].device).long()
        # 3. select
        selections = [s.select(acc, step, plan) for s, acc in zip(self.sparsifiers, accs)]
        recorded = [torch.sort(s.detach().long()).values.clone() for s in selections]
        before = [acc.clone() for acc in accs]
        # 4. exchange
        aggregate = torch.empty_like(accs[0])
        result = exchange(self.sparsifiers[0].exchange, selections, accs, aggregate, self.comm, leader)
        # 5. feedback, exactly as experiments/step.py does it
        feedback = Feedback(step=step, counts=result.counts, aggregated=result.aggregated)
        for sparsifier, residual, zeroed in zip(self.sparsifiers, self.residuals, result.zeroed):
            if zeroed is None or not sparsifier.error_feedback:
                residual.zero_()
            else:
                residual[zeroed] = 0
            sparsifier.on_residual_zeroed(zeroed)
            sparsifier.observe(feedback)
        residuals = [residual.clone() for residual in self.residuals]
        kept_plan = None if plan is None else plan.clone()
        return SteppedStep(step, leader, kept_plan, recorded, before, residuals, aggregate, result)

    def _average(self, accs: list[torch.Tensor], step: int) -> None:
        """The proposed pre-plan hook: average a small per-rank vector over ranks."""
        hooks = [getattr(s, "averaged_inputs", lambda acc, t: None) for s in self.sparsifiers]
        inputs = [hook(acc, step) for hook, acc in zip(hooks, accs)]
        if inputs[0] is None:
            return
        total = inputs[0].clone()
        for part in inputs[1:]:
            total.add_(part)
        self.comm.all_reduce_sum(total)
        total.div_(self.world_size)
        for sparsifier in self.sparsifiers:
            sparsifier.receive_average(total, step)


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
