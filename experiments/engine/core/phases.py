"""Wall time per phase of the sparsification step, for the step benchmark.

The step and the exchange call `clock.mark(phase)` where a phase ends: the time since the
previous mark is added to that phase. The default clock, `NO_CLOCK`, does nothing, so a run pays
one no-op call per phase. A real clock synchronizes the device first (a CUDA kernel still in the
queue belongs to the phase that queued it).
"""
from __future__ import annotations

import time
from collections.abc import Callable

# In step order; `plan` includes DEFT's averaged norms, `index_exchange` the size header, the
# index all-gather and the union, `value_exchange` gathering values and their all-reduce,
# `scatter` writing the aggregate, `residual` zeroing what was sent and the feedback.
PHASES = ("accumulate", "plan", "select", "index_exchange", "value_exchange", "scatter", "residual")


class PhaseClock:
    """Sums wall time per phase between `start` and successive `mark`s."""

    def __init__(self, synchronize: Callable[[], None] = lambda: None) -> None:
        self.synchronize = synchronize
        self.totals: dict[str, float] = dict.fromkeys(PHASES, 0.0)  # seconds
        self._last = time.perf_counter()

    def start(self) -> None:
        self.synchronize()
        self._last = time.perf_counter()

    def mark(self, phase: str) -> None:
        self.synchronize()
        now = time.perf_counter()
        self.totals[phase] = self.totals.get(phase, 0.0) + now - self._last
        self._last = now

    def reset(self) -> None:
        self.totals = dict.fromkeys(PHASES, 0.0)


class _NoClock(PhaseClock):
    def start(self) -> None:
        pass

    def mark(self, phase: str) -> None:
        pass


NO_CLOCK: PhaseClock = _NoClock()
