"""Counts what a block of code allocates on the CPU, through every allocator a selection can use.

The torch profiler sees only torch's allocator. The compiled kernels (sparsifiers/common/kernels) hand
tensors to numpy with .numpy() and run numba code: a temporary made by numpy in the wrapper is
seen only by tracemalloc (numpy reports its data buffers to it), and one made inside a numba
kernel by tracemalloc too (NRT allocates through Python's raw allocator here) and by numba's
runtime statistics, which count allocations whatever the allocator but not their bytes. A test of
"allocates nothing of the vector size" must watch all three, or a full-size temporary on the
compiled path passes unseen (the torch profiler alone measured 16 bytes for a 1 MB numba mask).

NRT also makes one allocation (a MemInfo) for every numpy array handed to a kernel, so the meter
counts the array arguments of every compiled call (compiled_calls) and reports only the NRT
allocations beyond them: the kernels' own temporaries, which should be none.
"""
from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from torch.profiler import ProfilerActivity, profile

from tests.helpers.compiled_calls import CompiledCalls

T = TypeVar("T")


@dataclass(frozen=True)
class Allocations:
    torch_bytes: int  # bytes torch's CPU allocator handed out (freed or not)
    python_peak_bytes: int  # tracemalloc's peak above the start: numpy buffers, Python objects
    numba_allocations: int  # NRT allocations beyond one per array argument: arrays made inside a kernel

    @property
    def bytes(self) -> int:
        return self.torch_bytes + self.python_peak_bytes


def _numba_allocation_count() -> int | None:
    """NRT allocations so far, enabling the counter on first use (it is off unless
    NUMBA_NRT_STATS=1); None where numba is not installed."""
    try:
        from numba.core.runtime import _nrt_python, rtsys
    except ImportError:
        return None
    if not _nrt_python.memsys_stats_enabled():
        _nrt_python.memsys_enable_stats()
    return rtsys.get_allocation_stats().alloc


def measure(block: Callable[[], T]) -> tuple[T, Allocations]:
    """Runs `block` once and returns its result with what it allocated."""
    spy = CompiledCalls()
    numba_before = _numba_allocation_count()
    # tracemalloc inside the profiler: starting the profiler allocates Python objects of its own
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof, spy.watching():
        was_tracing = tracemalloc.is_tracing()
        if not was_tracing:
            tracemalloc.start()
        tracemalloc.reset_peak()
        python_start, _ = tracemalloc.get_traced_memory()
        result = block()
        _, python_peak = tracemalloc.get_traced_memory()
        if not was_tracing:
            tracemalloc.stop()
    numba_after = _numba_allocation_count()
    torch_bytes = sum(max(event.self_cpu_memory_usage, 0) for event in prof.key_averages())
    numba = 0 if numba_before is None else numba_after - numba_before - spy.array_arguments
    return result, Allocations(torch_bytes, python_peak - python_start, numba)
