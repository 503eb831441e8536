"""The accumulate rule and the residual rule of the step (experiments/engine/core/error_feedback.py), against
expectations written out by hand, alone and through the step's phases with error feedback on
and off."""
from __future__ import annotations

import pytest
import torch

from experiments.engine.core.error_feedback import accumulate, keep_residual
from sparsifiers.dgc import DGC
from sparsifiers.common.layout import Layout
from sparsifiers.topk import TopK
from tests.helpers.stepped_ranks import SteppedRanks

LAYOUT = Layout.from_shapes([("w", (6,)), ("b", (2,))])  # N = 8


def topk(error_feedback: bool = True, world_size: int = 1, rank: int = 0) -> TopK:
    return TopK(LAYOUT, world_size, rank, density=0.25, error_feedback=error_feedback)  # k = 2


def test_accumulate_adds_the_gradient_to_the_residual_in_place():
    residual = torch.tensor([1.0, -2.0, 0.0, 0.5, 0.0, 0.0, 3.0, -1.0])
    grad = torch.tensor([0.5, 2.0, -1.0, 0.0, 4.0, 0.0, -3.0, 1.0])
    buffer = residual
    returned = accumulate(topk(), residual, grad)
    assert residual is buffer  # the residual buffer holds acc: no copy of N
    assert torch.equal(residual, torch.tensor([1.5, 0.0, -1.0, 0.5, 4.0, 0.0, 0.0, 0.0]))
    assert returned is grad  # the default precondition is the gradient itself, read only
    assert torch.equal(grad, torch.tensor([0.5, 2.0, -1.0, 0.0, 4.0, 0.0, -3.0, 1.0]))


def test_accumulate_adds_what_precondition_returns_once_per_step():
    """DGC's momentum correction: u_t = m u_(t-1) + g_t is what is added, so acc = v + u."""
    dgc = DGC(LAYOUT, 1, 0, density=0.25, momentum=0.5, warmup=False)
    residual = torch.zeros(8)
    g1 = torch.tensor([2.0, 0, 0, 0, 0, 0, 0, 4.0])
    g2 = torch.tensor([0, 2.0, 0, 0, 0, 0, 0, 2.0])
    accumulate(dgc, residual, g1)
    assert torch.equal(residual, g1)  # u_1 = g_1, v_0 = 0
    accumulate(dgc, residual, g2)  # u_2 = 0.5 u_1 + g_2 = [1, 2, 0, ..., 4]; acc = g_1 + u_2
    assert torch.equal(residual, torch.tensor([3.0, 2.0, 0, 0, 0, 0, 0, 8.0]))


@pytest.mark.parametrize("error_feedback, kept", [(True, [0.0, 2.0, 0.0, 4.0]), (False, [0.0] * 4)])
def test_keep_residual_zeroes_what_was_sent_or_everything(error_feedback, kept):
    acc = torch.tensor([1.0, 2.0, 3.0, 4.0])
    keep_residual(topk(error_feedback), acc, torch.tensor([0, 2]))
    assert acc.tolist() == kept


def test_keep_residual_after_a_dense_exchange_keeps_nothing():
    acc = torch.tensor([1.0, 2.0, 3.0])
    keep_residual(topk(error_feedback=True), acc, None)  # None: every coordinate was sent
    assert acc.tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("error_feedback", [True, False])
def test_the_step_carries_over_what_was_not_sent_only_with_error_feedback(error_feedback):
    """Two ranks, Top-k with k = 2, through every phase of the step. The acc that select sees at
    step 1 is, by hand: with error feedback, step 0's acc minus its union U plus g_1; without,
    g_1 alone."""
    world = SteppedRanks([topk(error_feedback, 2, r) for r in range(2)])
    g0 = [torch.tensor([5.0, 4.0, 1.0, 0.5, 0, 0, 0, 0]), torch.tensor([0, 0, 1.0, 0.5, 0, 0, 6.0, 3.0])]
    g1 = [torch.ones(8), torch.full((8,), 2.0)]
    first = world.step([g.clone() for g in g0], 0)
    assert [s.tolist() for s in first.selections] == [[0, 1], [6, 7]]
    assert first.aggregate.tolist() == [2.5, 2.0, 0, 0, 0, 0, 3.0, 1.5]  # mean over 2 at U
    second = world.step([g.clone() for g in g1], 1)
    if error_feedback:  # U = {0, 1, 6, 7} zeroed on both ranks; 2 and 3 kept
        expected = [torch.tensor([1, 1, 2.0, 1.5, 1, 1, 1, 1]), torch.tensor([2, 2, 3.0, 2.5, 2, 2, 2, 2])]
    else:
        expected = g1
    assert all(torch.equal(acc, want) for acc, want in zip(second.accs, expected))
