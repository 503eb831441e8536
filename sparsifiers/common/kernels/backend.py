"""Which implementation the selection kernels use: one process-wide knob, `kernels`.

    torch     the plain torch path: the reference, and the only path on a GPU.
    compiled  single-pass kernels compiled with numba (CPU tensors of float32/float64); an
              error if numba is missing.
    auto      compiled where it applies (numba importable, a CPU float tensor), torch elsewhere.

Both paths return exactly the same selections, unions and counts (tests/test_kernels.py); only
their speed differs. The knob is set once per process (the rank process sets it from the run's
`kernels` key; tests and benchmarks call `set_backend`).
"""
from __future__ import annotations

import functools
import importlib.util

import torch

from experiments.runformat.errors import ConfigError

BACKENDS = ("auto", "torch", "compiled")
COMPILED_DTYPES = (torch.float32, torch.float64)

_backend = "auto"


@functools.cache
def compiled_available() -> bool:
    """True if the compiled kernels import here (numba is a dependency; this guards odd installs,
    such as a numba that does not support the installed numpy: auto then takes the torch path)."""
    if importlib.util.find_spec("numba") is None:
        return False
    try:
        import sparsifiers.common.kernels.compiled  # noqa: F401
    except ImportError:
        return False
    return True


def check_backend(name: str) -> None:
    """The one check of a `kernels` value (run.py's validation, the DDP hook, set_backend):
    raises ConfigError naming the key."""
    if name not in BACKENDS:
        raise ConfigError(f"kernels must be {', '.join(BACKENDS[:-1])} or {BACKENDS[-1]}, got {name}: auto is the default")
    if name == "compiled" and not compiled_available():
        raise ConfigError("kernels=compiled needs numba, which is not installed: pip install numba, or kernels=auto")


def set_backend(name: str) -> None:
    """Chooses the kernels' implementation for this process; raises ConfigError naming the key."""
    global _backend
    check_backend(name)
    _backend = name


def current_backend() -> str:
    return _backend


def use_compiled(*tensors: torch.Tensor) -> bool:
    """Whether this call takes the compiled path: never under `torch`; otherwise only for CPU
    tensors of a compiled dtype (a GPU tensor or float16 takes the torch path even under
    `compiled`, as nothing else could run it)."""
    if _backend == "torch" or not compiled_available():
        return False
    for tensor in tensors:
        if tensor.device.type != "cpu" or (tensor.is_floating_point() and tensor.dtype not in COMPILED_DTYPES):
            return False
    return True


# -- the GPU's choices on CPU tensors (tests and op counts) -----------------------------------
# Some selections have a third implementation beside the two above: batched over a model's units
# in a fixed number of torch operations, for GPUs, where each op is a kernel launch and a host
# round trip costs far more than the work (DEFT's and Accordion's per-unit top-k). On a CPU the
# per-unit loop is faster, so it runs there. `simulated_gpu()` makes CPU tensors take the GPU's
# choice, so that tests prove the batched path equal to the loop and count its operations.
_simulated_gpu = 0


def batched_path(*tensors: torch.Tensor) -> bool:
    """Whether a selection takes its batched (GPU) path: any tensor off the CPU, or simulated."""
    return _simulated_gpu > 0 or any(tensor.device.type != "cpu" for tensor in tensors)


class simulated_gpu:
    """Context manager: CPU tensors take the GPU's batched paths (`batched_path` is True)."""

    def __enter__(self) -> "simulated_gpu":
        global _simulated_gpu
        _simulated_gpu += 1
        return self

    def __exit__(self, *exc) -> None:
        global _simulated_gpu
        _simulated_gpu -= 1
