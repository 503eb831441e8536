"""Error feedback: the accumulate rule of the step (phase 1) and what the residual keeps (phase 5).

    phase 1   acc_r = precondition_r(grad_r) + residual_r     (in place: the residual buffer holds acc)
    phase 5   residual_r = acc_r with the transmitted coordinates zeroed
              (error feedback off, or a dense exchange: all of acc_r is zeroed);
              after a low-rank exchange (PowerSGD) residual_r = acc_r - aggregate: every
              coordinate was sent, approximately, and the approximation's error is kept

So with error feedback on nothing is lost: acc_r = transmitted_r + new residual_r exactly, and
what was not sent is added to the next step's gradient. With it off the residual is zero again
after every step, so phase 1 gives acc_r = precondition_r(grad_r): the same rule, with nothing
carried over. `precondition` is the sparsifier's (DGC's momentum correction and clipping; the
gradient itself by default).

experiments/engine/core/step.py calls both; so does every test harness that drives ranks without a model
(tests/helpers/stepped_ranks.py), so the rule they test is the one the run uses. Tests that recompute the
rule by hand to check it (the reference implementations in tests/test_*.py) keep their own.
"""
from __future__ import annotations

import torch

from sparsifiers.common.base import Sparsifier


def accumulate(sparsifier: Sparsifier, residual: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """Phase 1: adds this rank's preconditioned gradient to its residual, in place, so that
    `residual` holds acc_r. Returns the preconditioned gradient (read only), which the
    non-finite check needs to tell a bad gradient from an overflowed residual (finite.py).
    `precondition` is called exactly once per step: DGC's momentum advances in it."""
    gradient = sparsifier.precondition(grad)
    residual.add_(gradient)
    return gradient


def keep_residual(sparsifier: Sparsifier, acc: torch.Tensor, zeroed: torch.Tensor | None,
                  subtracted: torch.Tensor | None = None) -> None:
    """Phase 5: turns acc_r (in place) into the new residual: the coordinates the exchange
    transmitted for this rank (`zeroed`, int64; None: all of them) are zeroed, the rest kept;
    or, when the exchange says so (`subtracted`, ExchangeResult's: the aggregate of a low-rank
    exchange), acc_r - subtracted over the whole vector, torch's PowerSGD error memory
    (`input_tensor_cp - input_tensor`). With the sparsifier's error feedback off nothing is kept."""
    if not sparsifier.error_feedback:
        acc.zero_()
    elif subtracted is not None:
        acc.sub_(subtracted)
    elif zeroed is None:
        acc.zero_()
    else:
        acc.index_fill_(0, zeroed, 0)
