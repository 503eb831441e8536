"""optimizer=sgd is torch's SGD stepped without its compile-only wrapper (experiments/engine/rank/optimizers.py):
the same update as torch.optim.SGD, bit for bit, in every form torch offers on CPU. That a rank's
optimizer never loads torch._dynamo is checked in a fresh interpreter by test_config.py (its
"heavy imports" test, which starts one anyway)."""
from __future__ import annotations

import pytest
import torch

from experiments.engine.rank.optimizers import SGD

FORMS = [
    {"lr": 0.05},
    {"lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4},
    {"lr": 0.05, "momentum": 0.9, "dampening": 0.1},
    {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-3},
    {"lr": 0.05, "momentum": 0.5, "maximize": True},
    {"lr": 0.05, "momentum": 0.9, "foreach": True},
    {"lr": 0.05, "momentum": 0.9, "foreach": False},
]


def parameters(seed: int) -> list[torch.nn.Parameter]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=generator)) for shape in ((7, 5), (5,), (3, 3, 2))]


@pytest.mark.parametrize("form", FORMS, ids=lambda form: ",".join(f"{k}={v}" for k, v in form.items() if k != "lr") or "plain")
def test_sgd_steps_exactly_as_torch_sgd(form):
    ours, theirs = parameters(0), parameters(0)
    ours_optimizer, theirs_optimizer = SGD(ours, **form), torch.optim.SGD(theirs, **form)
    generator = torch.Generator().manual_seed(1)
    for _ in range(5):
        for a, b in zip(ours, theirs):
            a.grad = torch.randn(a.shape, generator=generator)
            b.grad = a.grad.clone()
        ours_optimizer.step()
        theirs_optimizer.step()
        ours_optimizer.zero_grad()
        theirs_optimizer.zero_grad()
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)
    assert str(ours_optimizer.state_dict()) == str(theirs_optimizer.state_dict())


def test_sgd_runs_a_closure_with_grad_and_refuses_what_its_step_cannot_do():
    ours, theirs = parameters(0)[:1], parameters(0)[:1]

    def closure_over(weight: torch.nn.Parameter):
        def closure() -> torch.Tensor:
            assert torch.is_grad_enabled()  # torch's step enables grad for the closure
            weight.grad = None
            loss = (weight ** 2).sum()
            loss.backward()
            return loss
        return closure

    loss = SGD(ours, lr=0.1, momentum=0.9).step(closure_over(ours[0]))
    assert torch.equal(loss, torch.optim.SGD(theirs, lr=0.1, momentum=0.9).step(closure_over(theirs[0])))
    assert torch.equal(ours[0], theirs[0])
    with pytest.raises(ValueError, match="optimizer.differentiable=true"):
        SGD(ours, lr=0.1, differentiable=True)
    with pytest.raises(ValueError, match="Invalid learning rate"):  # torch's own checks still apply
        SGD(ours, lr=-1.0)

