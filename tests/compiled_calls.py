"""A spy on the compiled kernels (sparsifiers/kernels/compiled.py): which ran, how often, and how
many numpy arrays they were handed. Tests use it to show that a run on the compiled path really
went through the kernels (a method that calls none runs the same code on both paths), and the
allocation meter to discount numba's one MemInfo per array argument. `kernel_backend` runs a
block on one kernel path."""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from sparsifiers import kernels


class CompiledCalls:
    """Counts the calls of each compiled kernel (sparsifiers.kernels.compiled) and the numpy
    arrays they were handed, by wrapping the module's functions while the block runs: callers
    look them up as `compiled.<name>` at call time, so every call goes through the wrapper."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.array_arguments = 0

    @contextmanager
    def watching(self) -> Iterator["CompiledCalls"]:
        if not kernels.compiled_available():
            yield self
            return
        from sparsifiers.kernels import compiled

        originals = {name: getattr(compiled, name) for name in dir(compiled)
                     if hasattr(getattr(compiled, name), "py_func")}  # the njit dispatchers
        for name, kernel in originals.items():
            setattr(compiled, name, self._wrap(name, kernel))
        try:
            yield self
        finally:
            for name, kernel in originals.items():
                setattr(compiled, name, kernel)

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
