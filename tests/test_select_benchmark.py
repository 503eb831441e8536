"""`make bench MODE=select` times each repeat as a fresh step would (issue 45 item 5): DEFT
caches its unit norms per step and accumulator version, so repeats at one step timed a select
without its pass over N."""
from __future__ import annotations

import torch

from experiments.studies.benchmarks import select
from experiments.studies.benchmarks.step import benchmark_layout
from sparsifiers.deft import DEFT

NUMEL = 20_000
REPEATS = 5


def test_every_timed_repeat_computes_deft_unit_norms(monkeypatch):
    calls = []
    real = DEFT._local_norms
    monkeypatch.setattr(DEFT, "_local_norms", lambda self, acc: calls.append(1) or real(self, acc))
    acc = select.at_operating_point(select.gradient_like(NUMEL), 0.01)
    before = acc.clone()
    select.time_method("deft", 4, acc, benchmark_layout(NUMEL), 0.01, REPEATS)
    # the settle steps, then each timed plan and each timed select (the untimed plan between
    # them reads the last timed plan's norms: the same step and accumulator)
    assert len(calls) == select.SETTLE_STEPS + 2 * REPEATS, len(calls)
    assert torch.equal(acc, before)  # a fresh step's accumulator holds the same values
