"""optimizer=sgd is torch's SGD stepped without its compile-only wrapper (experiments/rank/optimizers.py):
the same update as torch.optim.SGD, bit for bit, in every form torch offers on CPU; and a rank's
optimizer, with the stand-in of experiments/core/eager.py, never loads torch._dynamo."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from experiments.rank.optimizers import SGD

REPO = Path(__file__).resolve().parents[1]

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


def test_a_ranks_optimizer_never_loads_dynamo():
    """What a rank process does with its optimizer (worker.py: the stand-in first), in a fresh
    interpreter: build, step, zero, save and load, every method torch wraps for the compiler."""
    probe = (
        "import sys, torch\n"
        "from experiments.core.eager import stand_in_for_dynamo_twins\n"
        "from experiments.rank.optimizers import SGD, ReleasedSGD\n"
        "stand_in_for_dynamo_twins(torch.optim.Optimizer)\n"
        "for kind in (SGD, ReleasedSGD):\n"
        "    weight = torch.nn.Parameter(torch.ones(3))\n"
        "    optimizer = kind([weight], lr=0.1, momentum=0.9)\n"
        "    weight.grad = torch.ones(3)\n"
        "    optimizer.step(); optimizer.zero_grad(); optimizer.load_state_dict(optimizer.state_dict())\n"
        "print('loaded:', 'torch._dynamo' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "loaded: False" in result.stdout, result.stdout
