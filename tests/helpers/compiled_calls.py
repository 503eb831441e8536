"""A spy on the compiled kernels (sparsifiers/common/kernels/compiled.py): which ran, how often, and how
many numpy arrays they were handed. Tests use it to show that a run on the compiled path really
went through the kernels (a method that calls none runs the same code on both paths), and the
allocation meter to discount numba's one MemInfo per array argument. `kernel_backend` runs a
block on one kernel path."""
from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from sparsifiers.common import kernels


class CompiledCalls:
    """Counts the calls of each compiled kernel (sparsifiers.common.kernels.compiled) and the numpy
    arrays they were handed, at the call sites: while the block runs, the package attribute
    `sparsifiers.common.kernels.compiled` is a stand-in whose kernels are counting wrappers, and callers
    import it as `from sparsifiers.common.kernels import compiled` at call time, so every call from
    Python goes through a wrapper. The kernel module itself is left alone: numba resolves a
    kernel's globals (the kernels it calls, `_magnitude`) in that module when it first compiles
    it, which may be inside the block, and a plain Python wrapper there would fail the compile
    ("Untyped global name"). Kernels called by other kernels are not counted (they never were:
    compiled code calls them directly)."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.array_arguments = 0

    @contextmanager
    def watching(self) -> Iterator["CompiledCalls"]:
        if not kernels.compiled_available():
            yield self
            return
        from sparsifiers.common.kernels import compiled

        stand_in = types.ModuleType(compiled.__name__, compiled.__doc__)
        stand_in.__dict__.update({name: self._wrap(name, value) if hasattr(value, "py_func") else value  # the njit dispatchers
                                  for name, value in vars(compiled).items() if not name.startswith("__")})
        kernels.compiled = stand_in
        try:
            yield self
        finally:
            kernels.compiled = compiled

    def _wrap(self, name: str, kernel: Callable) -> Callable:
        @functools.wraps(kernel)
        def counted(*args):
            self.calls[name] = self.calls.get(name, 0) + 1
            self.array_arguments += sum(isinstance(arg, np.ndarray) for arg in args)
            return kernel(*args)

        return counted


@contextmanager
def kernel_backend(name: str) -> Iterator[None]:
    """Runs the block under kernels=`name` (skipping the test where numba is missing and the
    compiled path is asked for), restoring the previous backend after."""
    if name == "compiled" and not kernels.compiled_available():
        pytest.skip("numba is not installed")
    previous = kernels.current_backend()
    kernels.set_backend(name)
    try:
        yield
    finally:
        kernels.set_backend(previous)
