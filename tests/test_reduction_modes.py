"""The two reduction modes in one process (experiments/engine/core/collectives.py): the same sum, metered as
what each sends; the knob is validated before launch and fixes the thread count.
The multi-process comparison is tests/test_deterministic_reduction.py."""
from __future__ import annotations

import pytest
import torch

from experiments.engine.core.collectives import RankCollectives
from experiments.engine.launcher.compose import compose_job
from experiments.runformat.errors import ConfigError
from experiments.engine.core.exchange import dense_allreduce
from experiments.runformat.runtime import resolve
from experiments.engine.launcher.validate import validate
from tests.conftest import TINY_RUN

WORKERS, NUMEL = 4, 1000


def parts() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    # Magnitudes spread over decades, so that a different summation order changes the last bits.
    return [torch.randn(NUMEL, generator=generator) * 10.0 ** torch.randint(-6, 6, (NUMEL,), generator=generator)
            for _ in range(WORKERS)]


def hosted(reduction: str) -> RankCollectives:
    return RankCollectives(WORKERS, list(range(WORKERS)), use_process_group=False, reduction=reduction)


def test_hosted_ring_and_rank_order_sum_alike_in_rank_order():
    a = parts()
    ring = hosted("ring").sum_over_ranks(a)
    rank_order = hosted("rank_order").sum_over_ranks(a)
    assert torch.equal(ring, rank_order)
    assert torch.equal(rank_order, ((a[0] + a[1]) + a[2]) + a[3])
    # ...which is not what summing two processes' partial sums gives: why rank_order gathers
    # every rank's own tensor instead of a process-local sum.
    assert not torch.equal(rank_order, (a[0] + a[1]) + (a[2] + a[3]))


def test_the_sum_may_go_into_the_first_part_in_place():
    a = parts()
    expected = ((a[0] + a[1]) + a[2]) + a[3]
    inputs = [t.clone() for t in a]
    total = hosted("rank_order").sum_over_ranks(inputs, inputs[0])
    assert total is inputs[0] and torch.equal(total, expected)


@pytest.mark.parametrize("reduction,per_rank_elements", [
    ("ring", 2 * (WORKERS - 1) / WORKERS * NUMEL),  # ring all-reduce
    ("rank_order", (WORKERS - 1) * NUMEL),  # all-gather of every rank's tensor
])
def test_each_mode_meters_what_it_sends(reduction, per_rank_elements):
    comm = hosted(reduction)
    out = torch.empty(NUMEL)
    dense_allreduce(parts(), out, comm)
    assert list(comm.meter.sent) == [per_rank_elements * 4] * WORKERS
    assert list(comm.meter.recv) == [per_rank_elements * 4] * WORKERS


def test_an_unknown_mode_is_refused_by_the_collectives():
    with pytest.raises(ValueError, match="reduction must be ring or rank_order, got tree"):
        hosted("tree")


@pytest.mark.parametrize("processes,ring_threads", [(1, 16), (2, 8), (4, 4)])
def test_rank_order_gives_every_layout_the_threads_of_one_rank_per_process(processes, ring_threads):
    """On 16 cores, 4 workers: ring gives each process 16 / processes threads; rank_order gives
    every layout the 16 / 4 of one rank per process (the cpu count is passed, not this machine's)."""
    threads = {
        reduction: resolve(compose_job([*TINY_RUN, "workers=4", f"processes={processes}", f"reduction={reduction}"]),
                           cpu_count=16).threads_per_process
        for reduction in ("ring", "rank_order")
    }
    assert threads == {"ring": ring_threads, "rank_order": 4}


def test_a_bad_mode_exits_2_with_one_line_before_launch(tmp_path, run_py_before_launch):
    result = run_py_before_launch(["reduction=tree", *TINY_RUN, f"output_root={tmp_path}"], timeout=120)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "reduction must be ring or rank_order, got tree" in lines[0], result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not any(tmp_path.iterdir()), "no run directory for bad input"


@pytest.mark.parametrize("args,message", [
    (["on_nonfinite=ignore"], "on_nonfinite must be fail or skip, got ignore"),
    (["max_skipped_steps=0"], "max_skipped_steps must be >= 1"),
])
def test_the_skip_knobs_are_validated(args, message):
    with pytest.raises(ConfigError, match=message):
        validate(compose_job([*args, *TINY_RUN]))
