"""The update applied to the aggregated gradient, and the parameter groups it sees.

Every optimizer here runs after the exchange, on the aggregate, identically on every rank, so
weight decay and momentum are always "after the reduction" (the papers' harness). `ReleasedSGD`
is the update of the DEFT/MiCRO/ExDyna released training script, in its order and its form:

    g <- g + wd * p          (wd = 0 for BatchNorm parameters)
    m <- mu * m + g          (m = g at the first step)
    g <- g + m               (the released "nesterov": g + m, not torch's g + mu * m)
    p <- p - lr * g

With mu = 0 (their LSTM) the step is 2 * lr * g: the released form doubles it, and so does this.

`SGD` is torch's SGD, its update untouched, stepped without the wrapper torch puts around every
optimizer's step for torch.compile (experiments/engine/core/eager.py says why that matters).
"""
from __future__ import annotations

import inspect
from typing import Any, Iterable

import torch

NORM_LAYERS = (torch.nn.modules.batchnorm._BatchNorm, torch.nn.GroupNorm, torch.nn.LayerNorm)


def parameter_groups(model: torch.nn.Module) -> list[dict[str, Any]]:
    """Two groups in parameter order: every parameter of a normalisation layer (BatchNorm's
    weight and bias) is marked `norm: True`, all others `norm: False`. torch's optimizers
    ignore the mark; ReleasedSGD gives the first group its `norm_weight_decay`."""
    norm_ids = {id(p) for module in model.modules() if isinstance(module, NORM_LAYERS) for p in module.parameters(recurse=False)}
    parameters = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in parameters if id(p) not in norm_ids], "norm": False},
        {"params": [p for p in parameters if id(p) in norm_ids], "norm": True},
    ]
    return [group for group in groups if group["params"]]


# torch.optim.SGD's own update, under its wrappers: `_use_grad_for_differentiable` sets grad mode
# and marks two graph breaks for torch.compile, importing torch._dynamo to do it on every step
# (1.4-1.9 s at a rank's first step); the profiler's hook, if torch has added it, is added again
# around SGD.step below.
TORCH_SGD_UPDATE = inspect.unwrap(torch.optim.SGD.step)


class SGD(torch.optim.SGD):
    """torch.optim.SGD (momentum, dampening, Nesterov, weight decay, foreach or fused, as torch
    chooses) with its update called directly under no_grad, which is what torch's wrapper does
    when nothing compiles. tests/test_eager_sgd.py checks the two agree bit for bit."""

    def __init__(self, params: Iterable[Any], *args: Any, **kwargs: Any) -> None:
        if kwargs.get("differentiable"):
            raise ValueError("optimizer.differentiable=true needs torch's own step: set optimizer._target_=torch.optim.SGD")
        super().__init__(params, *args, **kwargs)

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001 (torch's signature)
        return TORCH_SGD_UPDATE(self, closure)


class ReleasedSGD(torch.optim.Optimizer):
    """SGD with weight decay and momentum in the released script's form and order (see above)."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 0.1,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        norm_weight_decay: float = 0.0,
    ) -> None:
        for key, value in (("lr", lr), ("momentum", momentum), ("weight_decay", weight_decay), ("norm_weight_decay", norm_weight_decay)):
            if not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"optimizer.{key} must be a number >= 0, got {value!r}")
        defaults = {"lr": lr, "momentum": momentum, "weight_decay": weight_decay, "norm_weight_decay": norm_weight_decay, "norm": False}
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001 (torch's signature)
        if closure is not None:
            raise ValueError("ReleasedSGD takes no closure")
        for group in self.param_groups:
            decay = group["norm_weight_decay"] if group["norm"] else group["weight_decay"]
            for param in group["params"]:
                grad = param.grad
                if grad is None:
                    continue
                if decay > 0:
                    grad.add_(param, alpha=decay)
                state = self.state[param]
                if "momentum" not in state:
                    state["momentum"] = grad.clone()
                else:
                    state["momentum"].mul_(group["momentum"]).add_(grad)
                grad.add_(state["momentum"])
                param.add_(grad, alpha=-group["lr"])
        return None
