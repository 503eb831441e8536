"""on_nonfinite=skip: a step whose loss, gradient or aggregate is non-finite on any rank is skipped
on every rank, leaving the run exactly as it was before that step.

The checks are finite.py's. What skipping adds:

- agreement: every process must take the same path (a skipped step issues no exchange), so the
  hosted ranks' verdicts are gathered from every process (one tiny unmetered all-gather of a
  code per rank) before anything of the step is exchanged. The aggregate is identical on every
  rank, so its check needs no agreement.
- undo: hosted ranks share one gradient buffer, so every rank's gradient is already in its
  residual (and DGC's momentum) before the verdicts are known; float addition cannot be undone
  exactly. The guard therefore keeps, from the start of each step, a copy of every hosted
  rank's residual, sparsifier state, BatchNorm buffers and task state, and puts them back: error
  feedback never absorbs the bad gradient. The optimizer does not step, except when the step
  is found bad only after it (non-finite parameters after the update): for that case the guard
  also keeps the parameters and the optimizer's state from just before the update. The cost, in
  skip mode only: one residual copy per hosted rank and one parameter copy (memory and copies of
  N per step), the optimizer state's copy and the sparsifier state's.
- a limit: more than `max_skipped_steps` skipped steps in a row fail the run (it diverged).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch

from experiments.engine.core.finite import HINT, KINDS, NonFiniteValue
from experiments.engine.core.hosted import HostedRanks
from experiments.engine.core.replica import Replica
from experiments.engine.core.world import World


OK = 0  # verdict code of a finite rank; others are 1 + KINDS.index(kind)


@dataclass(frozen=True)
class SkippedStep:
    """Why a step was skipped: the first rank (in rank order) whose value was non-finite."""

    step: int
    rank: int | None  # None: the aggregate (the same on every rank)
    what: str

    def describe(self) -> str:
        where = "" if self.rank is None else f" on rank {self.rank}"
        return f"non-finite {self.what} at step {self.step}{where}"


@dataclass
class _Saved:
    residual: torch.Tensor
    sparsifier: dict[str, Any]
    buffers: list[torch.Tensor] | None
    task_state: dict[str, Any]


class SkipGuard:
    """Saves the hosted ranks' state at the start of a step, decides with every process whether
    the step is skipped, restores, and counts skipped steps."""

    def __init__(self, max_in_a_row: int) -> None:
        self.max_in_a_row = max_in_a_row
        self.in_a_row = 0
        self.total = 0
        self._saved: list[_Saved] = []
        self._model_buffers: list[torch.Tensor] = []
        self._parameters: list[torch.Tensor] = []
        self._optimizer: dict[str, Any] = {}
        self._verdicts: list[int] = []

    # -- one step ------------------------------------------------------------------------------
    def save(self, ranks: HostedRanks, replicas: list[Replica], model: torch.nn.Module) -> None:
        """Before phase 1: what the step may change besides parameters and optimizer state."""
        if len(self._saved) != len(replicas):
            self._saved = [_Saved(torch.empty_like(r), {}, None, {}) for r in ranks.residuals]
        for saved, replica, residual, sparsifier in zip(self._saved, replicas, ranks.residuals, ranks.sparsifiers):
            saved.residual.copy_(residual)
            saved.sparsifier = copy.deepcopy(sparsifier.state_dict())
            saved.buffers = None if replica.buffers is None else [b.clone() for b in replica.buffers]
            saved.task_state = copy.deepcopy(replica.task_state)
        self._model_buffers = [b.detach().clone() for b in model.buffers()]
        self._verdicts = [OK] * len(replicas)

    def save_update(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Before phase 6: what the optimizer step changes."""
        if len(self._parameters) != len(list(model.parameters())):
            self._parameters = [torch.empty_like(p) for p in model.parameters()]
        with torch.no_grad():
            for kept, parameter in zip(self._parameters, model.parameters()):
                kept.copy_(parameter)
        self._optimizer = copy.deepcopy(optimizer.state_dict())

    def restore_update(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Undoes the optimizer step: parameters and optimizer state as `save_update` kept them."""
        with torch.no_grad():
            for kept, parameter in zip(self._parameters, model.parameters(), strict=True):
                parameter.copy_(kept)
        optimizer.load_state_dict(self._optimizer)

    def found(self, index: int, error: NonFiniteValue) -> None:
        """Hosted rank number `index` (0-based here) had a non-finite value in phase 1."""
        self._verdicts[index] = 1 + KINDS.index(error.what)

    def agree(self, world: World, step: int) -> SkippedStep | None:
        """Every process's verdicts, the same on every rank: the first bad rank, or None."""
        local = torch.tensor(self._verdicts, dtype=torch.float64, device=world.device).view(-1, 1)
        codes = world.comm.gather_stats(local).view(-1).tolist()  # unmetered: bookkeeping
        for rank, code in enumerate(codes):
            if code != OK:
                return SkippedStep(step, rank, KINDS[int(code) - 1])
        return None

    def restore(self, ranks: HostedRanks, replicas: list[Replica], model: torch.nn.Module) -> None:
        """Puts back what `save` kept: the step leaves no trace but its consumed batches."""
        for index, (saved, replica) in enumerate(zip(self._saved, replicas)):
            ranks.load_rank(index, saved.residual, copy.deepcopy(saved.sparsifier))
            replica.load_state(saved.buffers, saved.task_state)
        for buffer, kept in zip(model.buffers(), self._model_buffers):
            buffer.copy_(kept)

    # -- the run -------------------------------------------------------------------------------
    def count(self, skipped: SkippedStep | None) -> None:
        """After every step: skipped steps in a row and in all."""
        if skipped is None:
            self.in_a_row = 0
        else:
            self.in_a_row += 1
            self.total += 1

    def state_dict(self) -> dict[str, int]:
        """The counters a checkpoint keeps (a resumed run counts on from them)."""
        return {"in_a_row": self.in_a_row, "total": self.total}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.in_a_row, self.total = int(state["in_a_row"]), int(state["total"])

    def fail_past_limit(self, skipped: SkippedStep) -> None:
        """More than `max_in_a_row` skips in a row: the run diverged; fail it."""
        if self.in_a_row > self.max_in_a_row:
            raise NonFiniteValue(
                f"{self.in_a_row} steps in a row skipped (on_nonfinite=skip, max_skipped_steps="
                f"{self.max_in_a_row}), the last with {skipped.describe()}: {HINT}",
                skipped.what,
            )
