"""Nothing sparsebench runs is compiled by torch.compile, so torch's compile-only wrappers need not
load the compiler.

torch wraps the optimizer's own methods (add_param_group, zero_grad, state_dict,
load_state_dict) in `torch._disable_dynamo`, which imports torch._dynamo on a method's first call
(1.4-1.9 s here, on top of torch's own 2.5-3.3 s) to build the method's dynamo-disabled twin,
then caches that twin on the plain function as `__dynamo_disable`. Where nothing compiles, the
twin and the plain function do the same thing, so the plain function can stand in for it. A
torch that names its cache otherwise imports dynamo as before: slower, never wrong.

The optimizer's `step` has a second wrapper that imports dynamo unconditionally; the SGD that
the default configs use steps without it (experiments/engine/rank/optimizers.py).
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

# torch/_compile.py: the attribute `_disable_dynamo` caches the dynamo-disabled twin under
CACHED_TWIN = "__dynamo_disable"


def stand_in_for_dynamo_twins(owner: type) -> list[Callable]:
    """For each of `owner`'s methods wrapped by torch._disable_dynamo that has no twin yet, the
    plain function becomes its own twin. Returns the functions it changed (to undo)."""
    plain = [method.__wrapped__ for method in vars(owner).values() if callable(getattr(method, "__wrapped__", None))]
    standing_in = [function for function in plain if not hasattr(function, CACHED_TWIN)]
    for function in standing_in:
        setattr(function, CACHED_TWIN, function)
    return standing_in


@contextlib.contextmanager
def dynamo_left_unimported(owner: type) -> Iterator[None]:
    """`stand_in_for_dynamo_twins` while it lasts, undone afterwards: for a process that may
    compile later (run.py's pre-flight builds an optimizer over a dummy parameter, in-process
    callers such as the tests go on to other things)."""
    standing_in = stand_in_for_dynamo_twins(owner)
    try:
        yield
    finally:
        for function in standing_in:
            delattr(function, CACHED_TWIN)
