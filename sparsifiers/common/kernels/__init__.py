"""Selection kernels with two implementations each, chosen by one knob (`kernels`, backend.py):
the plain torch reference and single-pass compiled kernels (numba) that return exactly the same
results. Sparsifiers and the exchange call these, never the implementations directly."""
from sparsifiers.common.kernels.backend import BACKENDS, check_backend, compiled_available, current_backend, set_backend, use_compiled
from sparsifiers.common.kernels.threshold import AtLeastSelector, count_at_least
from sparsifiers.common.kernels.topk import ExactTopK
from sparsifiers.common.kernels.union import sorted_union
from sparsifiers.common.kernels.warm_up import warm_up

__all__ = [
    "BACKENDS", "AtLeastSelector", "ExactTopK", "check_backend", "compiled_available", "count_at_least", "current_backend",
    "set_backend", "sorted_union", "use_compiled", "warm_up",
]
