"""Sparsifiers that fail on purpose, to test that one failing rank ends the whole job cleanly
(CrashingTopK) and that a NaN fails the run at the step it appears (NaNGradientTopK). Selected
from the command line: sparsifier._target_=tests.helpers.fault_injection.CrashingTopK."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import torch

from sparsifiers.common.layout import Layout
from sparsifiers.topk import TopK


class InjectedFault(RuntimeError):
    pass


class CrashingTopK(TopK):
    """Top-k that raises on `crash_rank` at `crash_step`."""

    def __init__(self, layout: Layout, world_size: int, rank: int, density: float,
                 crash_rank: int = 1, crash_step: int = 3, **knobs) -> None:
        super().__init__(layout, world_size, rank, density, **knobs)
        self.crash_rank, self.crash_step = crash_rank, crash_step

    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> torch.Tensor:
        if self.rank == self.crash_rank and step == self.crash_step:
            raise InjectedFault(f"injected fault on rank {self.rank} at step {step}")
        return super().select(acc, step, plan)


class NaNGradientTopK(TopK):
    """Top-k whose rank `nan_rank` sees a NaN in its gradient at step `nan_step` (its
    `precondition` is called once per step, so it counts steps itself)."""

    def __init__(self, layout: Layout, world_size: int, rank: int, density: float,
                 nan_rank: int = 1, nan_step: int = 3, **knobs) -> None:
        super().__init__(layout, world_size, rank, density, **knobs)
        self.nan_rank, self.nan_step = nan_rank, nan_step
        self._step = -1

    def precondition(self, grad: torch.Tensor) -> torch.Tensor:
        self._step += 1
        if self.rank == self.nan_rank and self._step == self.nan_step:
            grad[grad.numel() // 2] = float("nan")
        return grad


class KilledOnceTopK(TopK):
    """Top-k whose rank `kill_rank` kills its own process with SIGKILL before selecting at
    `kill_step`, once: the file `marker` records that it happened, so a restarted or resumed
    run goes on (torchrun restarts, resume)."""

    def __init__(self, layout: Layout, world_size: int, rank: int, density: float,
                 kill_step: int = 3, marker: str = "", kill_rank: int = 1, **knobs) -> None:
        super().__init__(layout, world_size, rank, density, **knobs)
        self.kill_step, self.marker, self.kill_rank = kill_step, Path(marker), kill_rank

    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> torch.Tensor:
        if self.rank == self.kill_rank and step == self.kill_step and not self.marker.exists():
            self.marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return super().select(acc, step, plan)


class NonFiniteUpdateSGD(torch.optim.SGD):
    """SGD whose update at step `nan_step` leaves a NaN in the first parameter, on every rank
    alike (as an overflowing learning rate would): the failure must name the update, never a
    difference between processes. It counts its own steps."""

    def __init__(self, params, lr: float, momentum: float = 0.0, weight_decay: float = 0.0,
                 nan_step: int = 2) -> None:
        super().__init__(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
        self.nan_step = nan_step
        self._step = -1

    @torch.no_grad()
    def step(self, closure=None):
        loss = super().step(closure)
        self._step += 1
        if self._step == self.nan_step:
            self.param_groups[0]["params"][0].view(-1)[0] = float("nan")
        return loss
