"""The step benchmark (experiments/studies/benchmarks/step.py) on a small vector: real gloo processes,
one rank each, and one hosting process; every phase is reported, and the torch and compiled
kernel paths, run on the same inputs, exchange the same number of coordinates at every step."""
from __future__ import annotations

import math

import pytest
import torch

from experiments.studies.benchmarks.step import (
    REFERENCE_BACKEND,
    Run,
    gradient_std,
    initial_lambda,
    rotate_into,
    run_distributed,
    run_hosted,
    start_residual,
)
from experiments.engine.core.phases import PHASES

NUMEL = 50_000
METHODS = ["topk", "micro"]
BACKENDS = ["torch", "auto"]
# The phases each method's step marks (experiments/engine/core/step.py, exchange.py): the step marks
# `plan` whether or not the method has a leader plan (without one it times asking for it), the
# union exchange marks index_exchange, value_exchange and scatter; CLT-k's leader broadcast
# carries the indices in the plan's broadcast and marks no index_exchange. A phase marked is
# > 0 at every step (a missing mark leaves it at exactly 0); one never marked is exactly 0.
PHASES_RUN = {
    "topk": set(PHASES),
    "micro": set(PHASES),
    "cltk": set(PHASES) - {"index_exchange"},
}


def check_rows(rows: list[dict], workers: int, methods: list[str]) -> None:
    assert {(row["method"], row["backend"]) for row in rows} == {(m, b) for m in methods for b in BACKENDS}
    for row in rows:
        assert row["workers"] == workers
        assert set(row["phases_ms"]) == set(PHASES), row["method"]
        for t, phases in enumerate(row["step_phases_ms"]):
            ran = {phase for phase, ms in phases.items() if ms > 0}
            assert ran == PHASES_RUN[row["method"]], (row["method"], row["backend"], t, phases)
            assert all(ms == 0.0 for phase, ms in phases.items() if phase not in ran)
        assert row["aggregated_per_k"] > 0
    # Same inputs, same method: the two kernel paths must agree on what was exchanged.
    for method in methods:
        torch_row, auto_row = (next(r for r in rows if (r["method"], r["backend"]) == (method, b)) for b in BACKENDS)
        assert torch_row["aggregated_per_k"] == auto_row["aggregated_per_k"], method


def test_distributed_ranks_report_every_phase():
    rows = run_distributed(Run(2, METHODS, BACKENDS, settle=2, repeats=1, numel=NUMEL))
    check_rows(rows, 2, METHODS)
    for row in rows:
        assert row["copy_ms"] > 0
        assert math.isclose(row["total_copies"], row["total_ms"] / row["copy_ms"])
        assert set(row["phases_copies"]) == set(row["phases_ms"])


def test_hosted_ranks_report_every_phase():
    """With CLT-k too: a leader plan, and an exchange without an index phase."""
    rows = run_hosted(Run(4, [*METHODS, "cltk"], BACKENDS, settle=1, repeats=2, numel=NUMEL))
    check_rows(rows, 4, [*METHODS, "cltk"])
    for row in rows:
        assert row["selection_ms"] == pytest.approx(row["phases_ms"]["plan"] + row["phases_ms"]["select"])


def test_a_crashing_rank_fails_the_run_instead_of_hanging():
    with pytest.raises(RuntimeError, match="no_such_method"):
        run_distributed(Run(2, ["no_such_method"], [REFERENCE_BACKEND], settle=1, repeats=1, numel=NUMEL))


def test_steady_gradients_cross_the_initial_threshold_at_the_density():
    """From the steady start, one step pushes about density * N coordinates over lambda0."""
    numel, density = 1_000_000, 0.001
    residual, scratch = torch.empty(numel), torch.empty(numel)
    start_residual(residual, scratch, density, "steady", seed=0)
    lambda0 = initial_lambda(numel, density)
    assert residual.abs().max() <= lambda0
    step = torch.randn(numel, generator=torch.Generator().manual_seed(1))
    residual.add_(step.mul_(gradient_std(numel, density, "steady")))
    crossed = int((residual.abs() >= lambda0).sum())
    assert 0.8 * density * numel < crossed < 1.2 * density * numel


def test_rotate_into_adds_a_rolled_copy():
    source, destination = torch.arange(10.0), torch.ones(10)
    rotate_into(destination, source, 13, accumulate=True)
    assert torch.equal(destination, torch.roll(source, 3) + 1)
    rotate_into(destination, source, 0, accumulate=False)
    assert torch.equal(destination, source)
