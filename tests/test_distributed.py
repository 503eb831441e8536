"""Real multi-process gloo runs of every sparsifier (every exchange kind), and the same configs
on hosted ranks: all ranks agree, build-up is what each method claims, and hosting W ranks in
fewer processes computes what W processes compute."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from hydra.utils import get_object
from omegaconf import OmegaConf

from experiments.engine.launcher.compose import CONF_DIR, compose_job
from sparsifiers.common.base import SelectionScope
from tests.conftest import REPO, run_world
from tests.helpers.exchange_reference import exchange_of
from tests.helpers.harness import result_name, spec_overrides
from tests.helpers.specs import EVERY_METHOD
from tests.helpers.step_recorder import merge_processes
from tests.test_full_step import check_semantics, check_traffic

pytestmark = pytest.mark.slow

STEPS = 6
METHODS = EVERY_METHOD


def run_harness(out, workers: int, processes: int) -> None:
    run_world([str(REPO / "tests" / "helpers" / "harness.py"), str(out), "--workers", str(workers),
               "--methods", ",".join(METHODS), "--steps", str(STEPS), "--record-steps"], processes)


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    """(workers, processes) -> out dir; each world runs every method once. The one-process world
    of each W goes first: it composes every method's config once into the session's cache
    (tests/helpers/compose_cache.py), which the worlds of several processes then read."""
    layouts = {(2, 1): None, (2, 2): None, (4, 1): None, (4, 4): None, (4, 2): None}
    for workers, processes in layouts:
        out = tmp_path_factory.mktemp(f"w{workers}p{processes}")
        run_harness(out, workers, processes)
        layouts[(workers, processes)] = out
    return layouts


def records(out, spec: str, processes: int) -> list[dict]:
    # weights_only=False: the step records are the harness's own dataclasses (tests/helpers/step_recorder.py).
    return [torch.load(out / f"{result_name(spec)}.process{p}.pt", weights_only=False) for p in range(processes)]


def world_steps(worlds, spec: str, workers: int, processes: int):
    """Every step of one world, its processes' records merged, after checking that what every
    process holds alike is alike."""
    per_process = [record["steps"] for record in records(worlds[(workers, processes)], spec, processes)]
    for steps in zip(*per_process):
        for other in steps[1:]:
            assert torch.equal(other.aggregate, steps[0].aggregate) and other.counts == steps[0].counts
            assert other.collectives == steps[0].collectives and (other.sent == steps[0].sent).all()
    return merge_processes(per_process)


def method_class(spec: str):
    node = OmegaConf.load(CONF_DIR / "sparsifier" / f"{spec.split(':')[0]}.yaml")
    return get_object(node._target_)


def shared_state(spec: str, record: dict) -> list[dict]:
    keys = method_class(spec).shared_state
    return [{k: v for k, v in step.items() if k in keys} for step in record["metrics"]]


def scope_of(spec: str) -> SelectionScope:
    return method_class(spec).scope


@pytest.mark.parametrize("spec", METHODS)
@pytest.mark.parametrize("workers", [2, 4])
def test_every_rank_ends_with_identical_parameters(worlds, spec, workers):
    per_process = records(worlds[(workers, workers)], spec, workers)
    for other in per_process[1:]:
        assert torch.equal(per_process[0]["params"], other["params"])
        assert all(torch.equal(a, b) for a, b in zip(per_process[0]["counts"], other["counts"]))
        assert per_process[0]["aggregated"] == other["aggregated"]
        # State the method declares shared (thresholds, partitions) is bit-identical on every rank.
        assert shared_state(spec, per_process[0]) == shared_state(spec, other)


@pytest.mark.parametrize("spec", METHODS)
def test_build_up_is_what_the_method_claims(worlds, spec):
    """Build-up recomputed from what the 4 processes sent (docs/metrics.md): |union of the S_r|
    over the mean |S_r| (whole scope) or over their sum (split scope), against the logged
    value, for every method; then what each method claims: split methods 1 exactly, the dense
    exchange and Random-k's shared draw 1, Top-k's overlapping selections more than 1, and no
    whole-scope method outside [1, W]. gTop-k's aggregate is its tree's final k, not the
    selections' union (tests/test_full_step.py checks it against the tree by hand): 1 exactly.
    Ok-Topk's is what its owners kept (checked there against its replay), within [0, W]: a
    recompute step keeps at most k of the selections' union."""
    processes = records(worlds[(4, 4)], spec, 4)
    logged = [row["buildup"] for row in processes[0]["exchange"]]
    if exchange_of(spec) == "low_rank":  # PowerSGD selects nothing: dense's 1 (docs/metrics.md)
        assert logged == pytest.approx([1.0] * STEPS)
        return
    numel = processes[0]["params"].numel()
    recomputed = []
    for step in range(STEPS):
        # The exchanged selections: a rank counted 0 sent nothing (CLT-k's non-leaders select and discard).
        counts = processes[0]["counts"][step].tolist()
        sent = [processes[rank]["selections"][step][rank] for rank in range(4) if counts[rank] > 0]
        assert [numel if s is None else s.numel() for s in sent] == [c for c in counts if c > 0]
        union = numel if None in sent else int(torch.unique(torch.cat(sent)).numel())
        if exchange_of(spec) == "tree_merge":
            union = counts[0]
        if exchange_of(spec) == "sparse_reduce_scatter":
            assert processes[0]["aggregated"][step] <= union
            union = processes[0]["aggregated"][step]
        total = sum(counts)
        recomputed.append(union / total if scope_of(spec) is SelectionScope.SPLIT else union / (total / 4))
    assert logged == pytest.approx(recomputed, rel=1e-12)
    if scope_of(spec) is SelectionScope.SPLIT:
        assert logged == pytest.approx([1.0] * STEPS)
    elif exchange_of(spec) in ("dense", "tree_merge") or spec.split(":")[0] == "randomk":
        assert logged == pytest.approx([1.0] * STEPS)
    elif exchange_of(spec) == "sparse_reduce_scatter":
        assert logged[0] == 1.0 and all(0.0 <= b <= 4.0 for b in logged), logged  # step 0: its dense warm-up
    else:
        assert all(1.0 <= b <= 4.0 for b in logged), logged
    if spec.startswith("topk"):
        assert sum(logged) / STEPS > 1.0


@pytest.mark.parametrize("spec", METHODS)
@pytest.mark.parametrize("processes", [1, 2])
def test_hosted_ranks_compute_what_real_processes_compute(worlds, spec, processes):
    """Same selections at every step, same final parameters. Not bitwise: gloo's ring allreduce
    over 4 processes adds the ranks' values in another order than a process summing its hosted
    ranks, so parameters agree to float32 rounding (1e-6 relative), not to the bit."""
    real = records(worlds[(4, 4)], spec, 4)
    hosted = records(worlds[(4, processes)], spec, processes)
    for step in range(STEPS):
        hosted_selections = {}
        for record in hosted:
            hosted_selections.update(record["selections"][step])
        for rank in range(4):
            expected = real[rank]["selections"][step][rank]
            got = hosted_selections[rank]
            assert (expected is None and got is None) or torch.equal(expected, got), (spec, step, rank)
        assert hosted[0]["aggregated"][step] == real[0]["aggregated"][step]
    scale = real[0]["params"].abs().max()
    assert (hosted[0]["params"] - real[0]["params"]).abs().max() <= 1e-6 * scale


@pytest.mark.parametrize("spec", METHODS)
@pytest.mark.parametrize("layout", [(2, 2), (4, 4), (4, 2)])
def test_every_step_follows_the_exchange_semantics_in_real_processes(worlds, spec, layout):
    """tests/test_full_step.py's checks on real gloo processes: acc is the carried residual plus
    the gradient; the aggregate is the mean over ranks of acc on the exchanged set and zero
    elsewhere; each residual is acc with what was transmitted zeroed; DEFT's common units are its
    plan's; the collectives, every size and the bytes are the by-hand ones."""
    steps = world_steps(worlds, spec, *layout)
    assert len(steps) == STEPS
    check_semantics(steps, spec)
    check_traffic(steps, spec, compose_job(spec_overrides(spec)).sparsifier.density)


@pytest.mark.parametrize("spec", METHODS)
@pytest.mark.parametrize("workers, processes", [(4, 1), (4, 2), (2, 1)])
def test_hosted_ranks_meter_the_traffic_real_processes_meter(worlds, spec, workers, processes):
    """The same step issues the same collectives, with the same sizes (padding and size headers
    included), and so the same bytes sent and received per rank and the same exchange metrics,
    whether W ranks run in W processes or fewer (4 in 2 or 1, 2 in 1)."""
    real, hosted = world_steps(worlds, spec, workers, workers), world_steps(worlds, spec, workers, processes)
    assert len(real) == len(hosted) == STEPS
    for step_real, step_hosted in zip(real, hosted, strict=True):
        assert step_hosted.collectives == step_real.collectives, (spec, step_real.step)
        assert step_hosted.sent.tolist() == step_real.sent.tolist() and step_hosted.recv.tolist() == step_real.recv.tolist()
    assert records(worlds[(workers, processes)], spec, processes)[0]["exchange"] == records(worlds[(workers, workers)], spec, workers)[0]["exchange"]


def test_the_parameter_checksum_fails_loudly_when_replicas_diverge_and_names_non_finite_ones(tmp_path):
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--max-restarts=0",
               "--rdzv-backend=c10d", "--rdzv-endpoint=localhost:0", str(REPO / "tests" / "helpers" / "divergence_check.py"), str(tmp_path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    for process in (0, 1):
        assert "parameters differ across processes at step 7" in (tmp_path / f"diverged.{process}").read_text()
        assert (tmp_path / f"non_finite.{process}").read_text().startswith(
            "non-finite parameters at step 8 on every process: the aggregate was finite, so the update overflowed")
        assert "parameters differ across processes at step 9: non-finite on process(es) [1] of 2 only" in (
            tmp_path / f"one_non_finite.{process}").read_text()
