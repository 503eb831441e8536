"""What the DDP hook refuses (README, "Use a sparsifier in your own DDP script"): one ConfigError
naming the setting and the fix, before the hook is registered; and a non-finite gradient, which
fails the backward.

A one-process gloo group inside the test process is enough: every refusal is checked before any
collective runs. Refusals that need more than that are not here: a `process_group=` smaller
than the world needs several processes, and DDP builds `mixed_precision=` only on CUDA (the
test sets the attribute DDP stores instead, which is what the hook reads).
"""
from __future__ import annotations

import datetime

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from experiments import metric_keys as keys
from experiments.core.finite import NonFiniteValue
from experiments.ddp import register_sparsifier
from experiments.errors import ConfigError


@pytest.fixture(scope="module", autouse=True)
def one_process_group(tmp_path_factory):
    store = tmp_path_factory.mktemp("ddp_refusals") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        yield
    finally:
        dist.destroy_process_group()


def ddp(dtype: torch.dtype = torch.float32) -> DistributedDataParallel:
    return DistributedDataParallel(torch.nn.Linear(8, 4).to(dtype))


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_parameters_other_than_float32_are_refused(dtype):
    with pytest.raises(ConfigError, match=rf"needs float32 parameters, got \['{dtype}'\].*torch.autocast"):
        register_sparsifier(ddp(dtype), "deft", density=0.5)


def test_ddp_mixed_precision_is_refused():
    model = ddp()
    model.mixed_precision = object()  # what DistributedDataParallel(mixed_precision=...) stores
    with pytest.raises(ConfigError, match="mixed_precision= is not supported: use torch.autocast"):
        register_sparsifier(model, "deft", density=0.5)


def test_dgc_refuses_an_optimizer_with_momentum():
    model = ddp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with pytest.raises(ConfigError, match=r"sparsifier=dgc applies momentum itself.*momentum=0 \(got momentum \[0.9\]\)"):
        register_sparsifier(model, "dgc", density=0.5, optimizer=optimizer)


def test_an_accepted_model_steps_through_the_hook():
    """The counterpart: the same small model in float32 trains through the hook."""
    model = ddp()
    hook = register_sparsifier(model, "topk", density=0.5)
    model(torch.randn(3, 8)).square().sum().backward()
    assert hook.step == 1 and hook.stats[keys.ROW_STEP] == 0
    assert hook.stats[keys.DENSITY_ACTUAL] == pytest.approx(0.5, abs=0.03)
    assert int(sum(p.grad.count_nonzero() for p in model.parameters())) == hook.stats[keys.K_MAX]


def test_a_non_finite_gradient_fails_the_backward():
    """No skip mode in the hook: the step fails (on every rank: the ranks agree on one flag)."""
    model = ddp()
    register_sparsifier(model, "topk", density=0.5)
    with pytest.raises(NonFiniteValue, match="non-finite gradient at step 0 on rank 0"):
        model(torch.full((3, 8), float("nan"))).sum().backward()
