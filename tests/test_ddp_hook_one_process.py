"""The DDP hook in a one-process gloo group inside the test process: what it refuses (docs/ddp_hook.md,
"Use a sparsifier in your own DDP script": one ConfigError naming the setting and the fix,
before the hook is registered), a non-finite gradient failing the backward, its state's
round trip and checks, and torch's pattern (`SparsifierState` + `sparsifier_hook`) and a
config node training as `register_sparsifier` with a name does. Equality with sparsebench's own step on real multi-process DDP is in
tests/test_ddp_hook.py.

A one-process group is enough here: every refusal is checked before any collective runs. Refusals that need more than that are not here: a `process_group=` smaller
than the world needs several processes, and DDP builds `mixed_precision=` only on CUDA (the
test sets the attribute DDP stores instead, which is what the hook reads).
"""
from __future__ import annotations

import datetime

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from experiments.runformat import metric_keys as keys
from experiments.engine.core.finite import NonFiniteValue
from experiments.engine.ddp import SparsifierState, register_sparsifier, sparsifier_hook
from experiments.runformat.errors import ConfigError


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
    torch.manual_seed(0)
    return DistributedDataParallel(torch.nn.Linear(8, 4).to(dtype))


@pytest.mark.parametrize("setting, override", [({"reduction": "tree"}, "reduction=tree"), ({"kernels": "fast"}, "kernels=fast")])
def test_an_unknown_reduction_or_kernels_is_refused_as_run_py_refuses_it(setting, override, tmp_path):
    with pytest.raises(ConfigError) as caught:
        register_sparsifier(ddp(), "topk", density=0.5, **setting)
    assert str(caught.value) == run_py_refusal(override, tmp_path)
    assert str(caught.value).startswith(f"{override.split('=')[0]} must be ")


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


def trained(register, steps: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """A fresh model's gradients after `steps` backwards through the hook `register(model)`
    registers, and the hook's residual."""
    model = ddp()
    state = register(model)
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        model.zero_grad(set_to_none=True)
        model(torch.randn(3, 8, generator=generator)).square().sum().backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()]), state.residual.clone()


def test_torchs_pattern_is_register_sparsifier():
    """`SparsifierState` + `register_comm_hook(state, sparsifier_hook)`, as torch's PowerSGD hook is
    registered, trains bit for bit as `register_sparsifier` does."""
    def torch_pattern(model):
        state = SparsifierState(model, "topk", density=0.25)
        model.register_comm_hook(state, sparsifier_hook)
        return state

    gradient, residual = trained(torch_pattern)
    same_gradient, same_residual = trained(lambda model: register_sparsifier(model, "topk", density=0.25))
    assert torch.equal(gradient, same_gradient) and torch.equal(residual, same_residual)
    assert residual.count_nonzero() > 0


def test_a_config_node_trains_as_its_name():
    """A node with a `_target_` (a Hydra config's cfg.sparsifier) is read through the clone's
    checks and builds the same method as its name."""
    node = {"_target_": "sparsifiers.topk.TopK", "density": 0.5}
    by_node = trained(lambda model: register_sparsifier(model, node))
    by_name = trained(lambda model: register_sparsifier(model, "topk", density=0.5))
    assert all(torch.equal(a, b) for a, b in zip(by_node, by_name))


def test_a_non_finite_gradient_fails_the_backward():
    """No skip mode in the hook: the step fails (on every rank: the ranks agree on one flag)."""
    model = ddp()
    register_sparsifier(model, "topk", density=0.5)
    with pytest.raises(NonFiniteValue, match="non-finite gradient at step 0 on rank 0"):
        model(torch.full((3, 8), float("nan"))).sum().backward()


def test_the_state_round_trips_into_a_fresh_hook():
    model = ddp()
    hook = register_sparsifier(model, "micro", density=0.25)
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):  # small inputs: gradients below MiCRO's first threshold stay in the residual
        model(0.01 * torch.randn(3, 8, generator=generator)).square().sum().backward()
    state = hook.state_dict()
    fresh = register_sparsifier(ddp(), "micro", density=0.25)
    fresh.load_state_dict(state)
    assert fresh.step == 3 and torch.equal(fresh.residual, hook.residual) and fresh.residual.count_nonzero() > 0
    assert fresh.sparsifier.state_dict() == hook.sparsifier.state_dict()


def test_a_state_of_another_method_format_or_knob_is_refused():
    state = register_sparsifier(ddp(), "topk", density=0.5).state_dict()
    hook = register_sparsifier(ddp(), "micro", density=0.5)
    with pytest.raises(ConfigError, match="hook state has method=topk, this hook has method=micro"):
        hook.load_state_dict(state)
    with pytest.raises(ConfigError, match="hook state has format 0, this version reads 1"):
        hook.load_state_dict({**state, "format": 0})
    other = register_sparsifier(ddp(), "topk", density=0.25)
    with pytest.raises(ConfigError, match=r"hook state has sparsifier.density=0.5, this hook has sparsifier.density=0.25"):
        other.load_state_dict(state)


def test_dgc_needs_the_optimizer_to_check_it():
    with pytest.raises(ConfigError, match="sparsifier=dgc applies momentum itself: pass optimizer="):
        register_sparsifier(ddp(), "dgc", density=0.5)


def test_parameters_ddp_ignores_are_refused():
    net = torch.nn.Linear(8, 4)
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(net, ["bias"])
    with pytest.raises(ConfigError, match=r"DDP ignores 1 parameters \(parameters_to_ignore\).*requires_grad=False"):
        register_sparsifier(DistributedDataParallel(net), "topk", density=0.5)


# A bad knob of each kind, as a hook's keyword and as run.py's override (Hydra reads the text).
BAD_KNOBS = [
    ("wrong type", {"density": "abc"}, "sparsifier.density=abc"),
    ("a number for a bool", {"error_feedback": 1}, "sparsifier.error_feedback=1"),
    ("not finite", {"density": float("inf")}, "sparsifier.density=inf"),
    ("out of range", {"density": 1.5}, "sparsifier.density=1.5"),
    ("unknown key", {"densty": 0.1}, "+sparsifier.densty=0.1"),
    ("a runtime argument", {"world_size": 2}, "+sparsifier.world_size=2"),
]


def run_py_refusal(override: str, out) -> str:
    """The line run.py prints for `override` (its preflight, in this process: the same checks)."""
    from experiments.engine.launcher.compose import preflight

    with pytest.raises(ConfigError) as caught:
        preflight(["dataset=digits", "model=mlp", "logger=local", "sparsifier=deft", override, f"output_root={out}"])
    return str(caught.value)


@pytest.mark.parametrize("knobs, override", [case[1:] for case in BAD_KNOBS], ids=[case[0] for case in BAD_KNOBS])
def test_a_bad_knob_fails_with_the_line_run_py_prints(knobs, override, tmp_path):
    """The hook's knobs pass run.py's typed checks (experiments/runformat/knob_types.py): the same
    message, naming the key, before the hook is registered."""
    expected = run_py_refusal(override, tmp_path)
    assert expected.startswith("sparsifier."), expected
    with pytest.raises(ConfigError) as caught:
        SparsifierState(ddp(), "deft", **knobs)
    assert str(caught.value) == expected
