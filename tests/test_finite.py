"""The non-finite checks of the step (experiments/engine/core/finite.py): what each one catches and names."""
from __future__ import annotations

import math

import pytest
import torch

from experiments.engine.core.finite import NonFiniteValue, check_accumulator, check_aggregate, check_loss


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


class _TwoProcesses:
    """A world of two processes whose other process reports `other` as its parameter checksum."""

    processes, device = 2, torch.device("cpu")

    def __init__(self, other: torch.Tensor) -> None:
        self.comm = type("Comm", (), {"gather_stats": staticmethod(lambda local: torch.cat([local, other.view(1, 2)]))})


@pytest.mark.parametrize("other, error, message", [
    (None, None, None),  # the same parameters: silent
    ("nan", "NonFiniteValue", r"^non-finite parameters at step 5 on every process: the aggregate was finite, so the update overflowed"),
    ("shifted", "ReplicasDiverged", r"^parameters differ across processes at step 5: \[\["),
    ("finite_here", "ReplicasDiverged", r"^parameters differ across processes at step 5: non-finite on process\(es\) \[1\] of 2 only"),
])
def test_the_replica_checksum_tells_non_finite_parameters_from_differing_ones(other, error, message) -> None:
    """(Real gloo processes: tests/test_distributed.py.) NaN never equals NaN: non-finite
    parameters on every process are the update's fault, not a broken exchange."""
    from experiments.engine.core.flat_grad import parameter_checksum
    from experiments.engine.rank.train import ReplicasDiverged, _check_replicas_agree

    model = torch.nn.Linear(3, 2)
    if other == "nan":
        with torch.no_grad():
            model.bias[0] = math.nan
    mine = parameter_checksum(model)
    theirs = {None: mine, "nan": mine, "shifted": mine + 1e-3, "finite_here": torch.tensor([math.inf, math.inf], dtype=torch.float64)}[other]
    errors = {"NonFiniteValue": NonFiniteValue, "ReplicasDiverged": ReplicasDiverged}
    if error is None:
        _check_replicas_agree(_TwoProcesses(theirs), model, 5)
        return
    with pytest.raises(errors[error], match=message):
        _check_replicas_agree(_TwoProcesses(theirs), model, 5)
