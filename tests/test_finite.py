"""The non-finite checks of the step (experiments/core/finite.py): what each one catches and names."""
from __future__ import annotations

import math

import pytest
import torch

from experiments.core.finite import NonFiniteValue, check_accumulator, check_aggregate, check_loss


def test_a_finite_step_passes() -> None:
    check_loss(0.5, 3, 1)
    check_accumulator(torch.ones(100), torch.ones(100), 3, 1)
    check_aggregate(torch.zeros(100), 3)


@pytest.mark.parametrize("loss", [math.nan, math.inf, -math.inf])
def test_a_non_finite_loss_names_step_and_rank(loss: float) -> None:
    with pytest.raises(NonFiniteValue, match="non-finite loss at step 7 on rank 2 .*lower optimizer.lr"):
        check_loss(loss, 7, 2)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_gradient_is_told_from_an_overflowed_residual(bad: float) -> None:
    grad = torch.ones(1000)
    grad[500] = bad
    with pytest.raises(NonFiniteValue, match="non-finite gradient at step 4 on rank 0"):
        check_accumulator(grad + 1.0, grad, 4, 0)
    acc = torch.ones(1000)
    acc[3] = bad  # a residual that overflowed; this step's gradient is finite
    with pytest.raises(NonFiniteValue, match="non-finite error-feedback accumulator .* at step 4 on rank 0"):
        check_accumulator(acc, torch.ones(1000), 4, 0)


def test_a_sum_beyond_float_range_says_so() -> None:
    acc = torch.full((4,), 3e38)  # every element finite, the float32 sum is not
    with pytest.raises(NonFiniteValue, match="every element finite"):
        check_accumulator(acc, torch.ones(4), 1, 0)


def test_a_non_finite_aggregate_fails() -> None:
    aggregate = torch.zeros(10)
    aggregate[9] = math.nan
    with pytest.raises(NonFiniteValue, match="non-finite aggregate at step 5"):
        check_aggregate(aggregate, 5)
