"""Learning-rate schedules, set before every step from the fractional epoch e = epoch + i / steps.

One rule covers the papers' schedules (conf/schedule/):

    factor = 1 + (F - 1) * min(e / warmup_epochs, 1)      F = batch_size / warmup_reference_batch * W
    lr(e)  = base_lr * factor, then divided by decay_factor once per milestone <= e

- MiCRO/ExDyna released (`warmup_step`): CNN base 0.1, F = 32/128 * W over 5 epochs, /10 at 150;
  LSTM base 2.5, F = 32/64 * W, /10 at 60 and 80.
- DEFT released (`step`): no warm-up; CNN 0.05, /10 at 150; LSTM 15.0, /10 at 45 and 80.
- `constant`: base_lr throughout.

base_lr is the optimizer's configured lr. The arithmetic (multiply by the factor, then divide
once per milestone) is the released script's, so a run and that script agree bit for bit.
"""
from __future__ import annotations

from typing import Sequence

import torch


class StepSchedule:
    """Optional linear warm-up towards F * base_lr, then step decays at milestone epochs."""

    def __init__(
        self,
        milestones: Sequence[float] = (),
        decay_factor: float = 10.0,
        warmup_epochs: float = 0.0,
        warmup_reference_batch: int | None = None,
    ) -> None:
        if any(m < 0 for m in milestones) or list(milestones) != sorted(milestones):
            raise ValueError(f"schedule.milestones must be increasing epochs >= 0, got {list(milestones)}")
        if decay_factor <= 0:
            raise ValueError(f"schedule.decay_factor must be > 0, got {decay_factor}")
        if warmup_epochs < 0:
            raise ValueError(f"schedule.warmup_epochs must be >= 0, got {warmup_epochs}")
        if warmup_epochs > 0 and not warmup_reference_batch:
            raise ValueError("schedule.warmup_epochs > 0 needs schedule.warmup_reference_batch (e.g. 128)")
        self.milestones = [float(m) for m in milestones]
        self.decay_factor = float(decay_factor)
        self.warmup_epochs = float(warmup_epochs)
        self.warmup_reference_batch = warmup_reference_batch
        self.optimizer: torch.optim.Optimizer | None = None  # set by bind()
        self.base_lr: float | None = None
        self.peak_factor = 1.0

    def bind(self, optimizer: torch.optim.Optimizer, batch_size: int, workers: int) -> "StepSchedule":
        """Takes base_lr from the optimizer and F from the per-worker batch and W."""
        self.optimizer = optimizer
        self.base_lr = float(optimizer.param_groups[0]["lr"])
        if self.warmup_epochs > 0:
            self.peak_factor = (batch_size / self.warmup_reference_batch) * workers
        return self

    def lr_at(self, epoch: float) -> float:
        lr = self.base_lr
        if self.warmup_epochs > 0:
            lr *= 1.0 + (self.peak_factor - 1.0) * min(epoch / self.warmup_epochs, 1.0)
        for milestone in self.milestones:
            if epoch < milestone:
                break
            lr /= self.decay_factor
        return lr

    def set_epoch(self, epoch: float) -> float:
        """Sets every parameter group's lr for this step; returns it (logged as train/lr)."""
        lr = self.lr_at(epoch)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def describe(self) -> dict:
        return {
            "milestones": self.milestones, "decay_factor": self.decay_factor, "warmup_epochs": self.warmup_epochs,
            "warmup_reference_batch": self.warmup_reference_batch, "peak_factor": self.peak_factor, "base_lr": self.base_lr,
        }
