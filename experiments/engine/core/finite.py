"""Non-finite values fail the run at the step where they appear, naming the step and the rank.

A diverged run (a learning rate far too large, an overflow in backward) would otherwise go on:
NaN is never >= a threshold, so threshold methods leave it in the residual for good, top-k sends
it, and the run can finish "done" with a NaN loss. Four checks, every step:

    loss        the rank's loss (already a Python float: free)
    gradient    acc = precondition(grad) + residual, summed once (one read of N per rank, small
                beside a forward and backward): a NaN or inf anywhere makes the sum non-finite.
                Only when it is does a second pass tell a non-finite gradient from a residual
                that overflowed.
    aggregate   the exchange's result, summed once per process (identical on every rank)
    parameters  after the optimizer step, each parameter summed in float64 (no overflow from
                finite float32 values: only a NaN or inf makes it non-finite). The aggregate was
                finite, so the update itself made them non-finite: a learning rate, weight
                decay or momentum far too large. Without this check the first sign would be the
                next step's loss, or the cross-process checksum comparing NaN with NaN.

A sum can overflow to inf with every term finite only near float32's limit (1e38), where the
run has diverged anyway; the message then says so.
"""
from __future__ import annotations

import math

import torch

HINT = "the run diverged: lower optimizer.lr (or check the data and the model)"


GRADIENT = "gradient"
ACCUMULATOR = "error-feedback accumulator (residual + gradient)"
OVERFLOW = "accumulator sum (every element finite, their sum beyond float range)"
PARAMETERS = "parameters after the optimizer step"
UPDATE_HINT = (
    "the aggregate was finite, so the update overflowed: lower optimizer.lr "
    "(or optimizer.weight_decay, optimizer.momentum)"
)
KINDS = ("loss", GRADIENT, ACCUMULATOR, OVERFLOW, "aggregate", PARAMETERS)  # what can be non-finite


class NonFiniteValue(RuntimeError):
    """A loss, gradient or aggregate that is NaN or infinite; `what` is one of KINDS."""

    def __init__(self, message: str, what: str) -> None:
        super().__init__(message)
        self.what = what


def check_loss(loss: float, step: int, rank: int) -> None:
    if not math.isfinite(loss):
        raise NonFiniteValue(f"non-finite loss at step {step} on rank {rank} (loss = {loss}): {HINT}", "loss")


def check_accumulator(acc: torch.Tensor, grad: torch.Tensor, step: int, rank: int, hint: str = HINT) -> None:
    """`acc` after the gradient `grad` was added to it; `hint` ends the message (the DDP hook
    has its own: a user's script has no optimizer.lr key)."""
    if math.isfinite(float(acc.sum())):
        return
    if not bool(torch.isfinite(grad).all()):
        what = GRADIENT
    elif not bool(torch.isfinite(acc).all()):
        what = ACCUMULATOR
    else:
        what = OVERFLOW
    raise NonFiniteValue(f"non-finite {what} at step {step} on rank {rank}: {hint}", what)


def check_aggregate(aggregate: torch.Tensor, step: int, hint: str = HINT) -> None:
    if not math.isfinite(float(aggregate.sum())):
        raise NonFiniteValue(f"non-finite aggregate at step {step} (the same on every rank): {hint}", "aggregate")


def parameters_are_finite(parameters) -> bool:
    """Whether every element of every tensor is finite: one float64 sum per tensor, one sync."""
    sums = [p.detach().sum(dtype=torch.float64) for p in parameters]
    return not sums or math.isfinite(float(torch.stack(sums).sum()))


def check_parameters(model: torch.nn.Module, step: int) -> None:
    """After the optimizer step: the same parameters on every rank, so no rank is named."""
    if not parameters_are_finite(model.parameters()):
        raise NonFiniteValue(f"non-finite {PARAMETERS} at step {step} (the same on every rank): {UPDATE_HINT}", PARAMETERS)
