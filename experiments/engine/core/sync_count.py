"""Counting what makes a hosted step heavy on a GPU, on any device: the operations dispatched
(each a kernel launch on CUDA, 5-20 us of host time) and the host syncs among them (the host
waits for the GPU's queue to drain).

A host sync is an operation that needs a device value on the host: `.item()`, `int(t)`,
`float(t)` (aten._local_scalar_dense), an output whose size depends on the data (nonzero, boolean
masks, masked_select, unique, repeat_interleave without output_size), and a copy between devices
(`.cpu()`, `torch.tensor(data, device=cuda)`: blocking copies synchronize their stream), and
`torch.cuda.synchronize` itself, which is no aten operation (counted by wrapping it). On the
CPU the same code dispatches the same operations, so the counts are measured there by
construction, except cross-device copies, which exist only where there are two devices
(`copies` counts them on CUDA). Used by tests/test_exchange_syncs.py (bounds independent of W),
by the GPU check (experiments/studies/benchmarks/gpu_check.sh) and by the selection's op counts
(experiments/studies/benchmarks/op_counts.py, which adds the Python-level host reads).
"""
from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# Operations whose result the host must wait for, on CUDA.
SYNCING = frozenset({
    "aten._local_scalar_dense", "aten.nonzero", "aten.nonzero_static", "aten.nonzero_numpy", "aten.argwhere",
    "aten.masked_select", "aten._unique", "aten._unique2", "aten.unique_dim", "aten.unique_consecutive",
    "aten.equal", "aten.is_nonzero",
})

CUDA_SYNCHRONIZE = "torch.cuda.synchronize"  # a host sync outside dispatch (SyncCounter.__enter__)


def _name(func: Any) -> str:
    return f"aten.{func._schema.name.split('::')[-1]}"


def _devices(value: Any) -> set[str]:
    if isinstance(value, torch.Tensor):
        return {value.device.type}
    if isinstance(value, (list, tuple)):
        return set().union(*(_devices(v) for v in value)) if value else set()
    return set()


def _bool_index(args: tuple) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or ())


class SyncCounter(TorchDispatchMode):
    """`with SyncCounter() as counter:` counts every aten operation dispatched inside (`ops`),
    the host syncs among them (`syncs`, by name in `sync_ops`) and the copies between devices
    (`copies`, syncs too). With `count_bytes`, also the bytes of every operation's tensor
    arguments and results (`bytes`: each read or written once), the memory traffic a
    bandwidth-bound kernel pays (the end-to-end model's selection time, endtoend/selection.py)."""

    def __init__(self, count_bytes: bool = False) -> None:
        super().__init__()
        self.count_bytes = count_bytes
        self.bytes = 0
        self.bytes_by_op: Counter[str] = Counter()
        self.ops = 0
        self.syncs = 0
        self.copies = 0
        self.sync_ops: Counter[str] = Counter()
        self.op_names: Counter[str] = Counter()

    def __enter__(self) -> "SyncCounter":
        # torch.cuda.synchronize is no aten operation, so dispatch never sees it: it is counted
        # by wrapping it while the counter is active (whatever it is now: tests fake it on CPUs).
        self._synchronize = torch.cuda.synchronize

        def counted_synchronize(*args, **kwargs):
            self.syncs += 1
            self.sync_ops[CUDA_SYNCHRONIZE] += 1
            return self._synchronize(*args, **kwargs)

        torch.cuda.synchronize = counted_synchronize
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        torch.cuda.synchronize = self._synchronize
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _name(func)
        self.ops += 1
        self.op_names[name] += 1
        syncing = name in SYNCING
        if (name == "aten.repeat_interleave" and func._schema.overload_name in ("Tensor", "self_Tensor")
                and kwargs.get("output_size") is None):
            syncing = True  # tensor repeats: the output's size is their sum, read on the host
        if name in ("aten.index", "aten.index_put_", "aten._index_put_impl_") and _bool_index(args):
            syncing = True  # a boolean mask becomes indices: its count is read on the host
        out = func(*args, **kwargs)
        if name in ("aten._to_copy", "aten.copy_", "aten.to") and len(_devices(args) | _devices(out)) > 1:
            self.copies += 1
            syncing = True
        if syncing:
            self.syncs += 1
            self.sync_ops[name] += 1
        if self.count_bytes:
            leaves = tree_flatten((args, kwargs, out))[0]
            nbytes = sum(t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor))
            self.bytes += nbytes
            self.bytes_by_op[name] += nbytes
        return out
