"""Layouts compared by a test run on one device, whatever GPUs the machine has (issue 36 item 5).

On a machine with one GPU, `make test` failed: device=auto put the hosted run of
test_the_command_line_logs_the_same_metrics_hosted_and_in_processes on the GPU and its 2-process
run on the CPU, whose rows differed at step 0. The rule is a pure function of the config and the
GPU count (experiments/runtime.auto_device), so the pin is checked here without a GPU: every
registered comparison (tests/helpers/layouts.py) is resolved for 0 to 8 GPUs.
"""
from __future__ import annotations

import re

import pytest

import tests.test_deterministic_reduction  # noqa: F401  (registers its comparison)
from experiments.runformat.errors import ConfigError
from experiments.engine.launcher.compose import check_layout_devices, compose_job
from experiments.runformat.runtime import auto_device, mixed_layout_devices, resolve
from tests.conftest import REPO, TINY_RUN
from tests.helpers.layouts import COMPARED_LAYOUTS, ONE_DEVICE

GPU_COUNTS = (0, 1, 2, 4, 8)
# Test files that write `processes={...}` into a command line but compare no two layouts.
ONE_LAYOUT_EACH = {
    "test_resume.py": "a restarted run against the same layout's run without the restart",
    "test_skip_nonfinite.py": "one layout (2 processes); the hosted case is another test's run",
    "test_reduction_modes.py": "resolves thread counts of composed configs; launches no run",
    "test_stopping.py": "stops runs and checks how they end; compares no numbers",
}


def test_auto_takes_the_gpu_only_with_one_per_process():
    assert [auto_device(1, gpus) for gpus in GPU_COUNTS] == ["cpu", "cuda", "cuda", "cuda", "cuda"]
    assert [auto_device(2, gpus) for gpus in GPU_COUNTS] == ["cpu", "cpu", "cuda", "cuda", "cuda"]
    assert auto_device(4, 2) == "cpu"


@pytest.mark.parametrize("test_name", sorted(COMPARED_LAYOUTS))
def test_every_compared_layout_is_pinned_to_one_device(test_name):
    for layouts in COMPARED_LAYOUTS[test_name]:
        assert all(ONE_DEVICE in layout for layout in layouts), layouts
        cfgs = [compose_job(layout) for layout in layouts]
        for gpus in GPU_COUNTS:
            devices = {resolve(cfg, gpus=gpus, cpu_count=2).device for cfg in cfgs}
            assert len(devices) == 1, (test_name, gpus, devices)
            assert mixed_layout_devices(cfgs, gpus) is None
        # Without the pin, one GPU splits them: the failure this test guards against.
        unpinned = [compose_job([arg for arg in layout if arg != ONE_DEVICE] + ["device=auto"]) for layout in layouts]
        assert {resolve(cfg, gpus=1, cpu_count=2).device for cfg in unpinned} == {"cpu", "cuda"}


def test_every_test_that_varies_the_processes_of_a_command_line_is_registered_or_compares_none():
    registered = set(COMPARED_LAYOUTS)
    for path in sorted((REPO / "tests").glob("test_*.py")):
        text = path.read_text()
        if 'f"processes={' not in text or path.name == "test_layout_devices.py":
            continue
        names = set(re.findall(r"^def (test_\w+)", text, flags=re.M))
        assert path.name in ONE_LAYOUT_EACH or names & registered, (
            f"{path.name} writes processes={{...}} into a command line: if it compares layouts, pin "
            f"{ONE_DEVICE} and register them in tests/helpers/layouts.py; else name it in ONE_LAYOUT_EACH")


def test_the_in_process_harnesses_put_their_ranks_on_the_cpu():
    """The harnesses compare hosted and distributed worlds too: init_world gets "cpu" literally."""
    calls = []
    for path in sorted((REPO / "tests").glob("*.py")):
        calls += [(path.name, call) for call in re.findall(r"init_world\(([^()]*(?:\([^()]*\)[^()]*)*)\)", path.read_text())]
    assert len(calls) >= 8
    for name, call in calls:
        arguments = [a.strip() for a in call.split(",")]
        assert arguments[1] == '"cpu"', (name, call)


def _sweep(*layouts: str, reduction: str = "rank_order", device: str = "auto"):
    return [compose_job([*TINY_RUN, "workers=4", f"reduction={reduction}", f"device={device}", layout]) for layout in layouts]


def test_a_rank_order_sweep_whose_layouts_auto_resolves_apart_is_refused_naming_the_fix():
    sweep = _sweep("processes=1", "processes=2", "processes=4")
    assert mixed_layout_devices(sweep, 0) is None  # the CPU for all
    assert mixed_layout_devices(sweep, 4) is None  # a GPU per process for all
    message = mixed_layout_devices(sweep, 1)
    assert "workers=4 processes=1 on cuda" in message and "processes=2, workers=4 processes=4 on cpu" in message
    assert "set device=cpu" in message and "1 GPU(s)" in message
    with pytest.raises(ConfigError, match="set device=cpu"):
        check_layout_devices(sweep, gpus=2)
    check_layout_devices(sweep, gpus=0)
    # Pinned, written out, or ring (which promises no bits): nothing to say.
    assert mixed_layout_devices(_sweep("processes=1", "processes=2", device="cpu"), 1) is None
    assert mixed_layout_devices(_sweep("processes=1", "processes=2", reduction="ring"), 1) is None
