"""The whole gradient from DDP's buckets, and the aggregate back into them.

DDP hands a communication hook one bucket at a time, in bucket order, and rebuilds its buckets
after the first iteration (by the order gradients became ready). DEFT, MiCRO and ExDyna select
over the whole gradient vector, so no bucket can be exchanged on its own. The assembly copies
each bucket's gradients into one flat buffer laid out like the runner's (`Layout.from_module`:
parameter order, whatever the buckets are), keeps each bucket's future pending, and, once the
last bucket has arrived and the exchange has written the aggregate into the buffer, copies it
back into every bucket and completes their futures. Parameters are found by identity, not by
position, so rebuilt buckets, several buckets or one bucket for the whole model all work.

DDP launches buckets strictly in index order and waits on their futures only when backward has
finished, so the last bucket's hook always runs before any future is waited on.

With `find_unused_parameters=True` DDP copies no bucket into the `.grad` of a parameter that no
rank used this step, but the sparsifier may still select its coordinates from the residual
(it was used before), and error feedback then drops them from the residual: so the assembly
writes the aggregate into the `.grad` of such a parameter itself (`write_all_grads`), unless it
is zero there (then `.grad` stays None, as DDP leaves it).
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from sparsifiers.common.layout import Layout


class BucketAssembly:
    """The flat gradient of one model assembled from DDP buckets, one iteration at a time."""

    def __init__(self, module: torch.nn.Module, layout: Layout, flat: torch.Tensor, write_all_grads: bool = False) -> None:
        self._parameters = [p for p in module.parameters() if p.requires_grad]
        self.flat = flat
        self.numel = layout.numel
        self.write_all_grads = write_all_grads
        self._segment = {id(p): (s.offset, s.end) for p, s in zip(self._parameters, layout.segments)}
        # CUDA tensors in a future must name their device, or a waiter may read them before the
        # stream that wrote them is done (torch.futures.Future's own warning).
        self._devices = [flat.device] if flat.device.type == "cuda" else None
        self._pending: list[tuple[dist.GradBucket, torch.futures.Future]] = []
        self._received = 0
        self.copy_s = 0.0  # time spent copying buckets in and the aggregate out, this iteration

    @property
    def buckets(self) -> int:
        """How many buckets this iteration has delivered so far."""
        return len(self._pending)

    def add(self, bucket: dist.GradBucket) -> torch.futures.Future:
        """Copies the bucket's gradients into the flat buffer; returns its (pending) future."""
        started = time.perf_counter()
        if not self._pending:
            self.copy_s = 0.0
        for parameter, gradient in zip(bucket.parameters(), bucket.gradients()):
            if id(parameter) not in self._segment:
                raise RuntimeError(
                    f"DDP bucket {bucket.index()} holds a parameter of shape {tuple(parameter.shape)} that is not "
                    "a trainable parameter of the module the hook was registered for"
                )
            start, end = self._segment[id(parameter)]
            self.flat[start:end].copy_(gradient.reshape(-1))
            self._received += end - start
        future: torch.futures.Future = torch.futures.Future(devices=self._devices)
        self._pending.append((bucket, future))
        self.copy_s += time.perf_counter() - started
        return future

    def check_complete(self) -> None:
        """After the last bucket: every gradient element arrived exactly once."""
        if self._received != self.numel:
            raise RuntimeError(
                f"DDP's buckets delivered {self._received} gradient elements, the model has {self.numel}: "
                "a parameter was added, frozen or unfrozen after the hook was registered"
            )

    def deliver(self) -> None:
        """Copies the aggregate (now in the flat buffer) into every bucket; completes the futures."""
        started = time.perf_counter()
        pending, self._pending, self._received = self._pending, [], 0
        for bucket, _ in pending:
            for parameter, gradient in zip(bucket.parameters(), bucket.gradients()):
                start, end = self._segment[id(parameter)]
                gradient.copy_(self.flat[start:end].view_as(gradient))
        if self.write_all_grads:
            for parameter in self._parameters:
                start, end = self._segment[id(parameter)]
                value = self.flat[start:end].view_as(parameter)
                if parameter.grad is not None:  # DDP writes the same values into a used one again
                    parameter.grad.copy_(value)
                elif bool(value.any()):  # a zero aggregate leaves .grad None, as DDP does: no
                    parameter.grad = value.clone()  # weight decay or momentum step for it
        self.copy_s += time.perf_counter() - started
        for bucket, future in pending:
            future.set_result(bucket.buffer())

    def fail(self, error: BaseException) -> None:
        """Completes every pending future with `error`, so that DDP raises it instead of waiting."""
        pending, self._pending, self._received = self._pending, [], 0
        for _, future in pending:
            if not future.done():
                future.set_exception(error)
