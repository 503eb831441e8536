"""A sparsifier that crashes on purpose, to test that one failing rank ends the whole job
cleanly. Selected from the command line: sparsifier._target_=tests.fault_injection.CrashingTopK."""
from __future__ import annotations

import torch

from sparsifiers.layout import Layout
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
