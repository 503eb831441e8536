"""Dense allreduce: the baseline every sparsifier is compared with, in fp32 or, as torch's DDP
compress hooks (`default_hooks._compress_hook`: bf16_compress_hook, fp16_compress_hook), with
every rank's contribution rounded to a 16-bit type for the wire.

With `precision` h in {bf16, fp16} the exchange computes exactly (docs/algorithms.md, "dense"):

    c_r = round_h(round_h(acc_r) / W)       (the hook's `buffer.to(h).div_(W)`: cast, then divide in h)
    s   = sum_r c_r                         (carried in fp32 through the run's reduction)
    agg = round_h(s), back in fp32

The meter counts the all-reduce at h's 2 bytes per element, although gloo carries the rounded
values in fp32 here (it has no bf16 sum on every platform, and summing in fp32 makes the result
one rounding, the same however the ranks are hosted). No error feedback: the hooks keep none.
"""
from __future__ import annotations

from typing import Any

import torch

from experiments.runformat.errors import require
from sparsifiers.common.base import SelectionScope, Sparsifier
from sparsifiers.common.exchange_kinds import ExchangeKind, WireAllReduce
from sparsifiers.common.layout import Layout

# precision -> the wire dtype (None: the accumulator's own, float32 in every run)
PRECISIONS: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
FP32_BYTES = 4  # every run's flat gradient is float32


class Dense(Sparsifier):
    """Sends every coordinate: agg = mean_r acc_r (rounded through `precision`). Error feedback
    has nothing to keep. `overlap` changes no number of the step: it tells the end-to-end
    cluster model that this baseline's all-reduce runs in DDP-style buckets during backward."""

    name = "dense"
    scope = SelectionScope.WHOLE
    exchanges = (ExchangeKind.DENSE,)

    def __init__(self, layout: Layout, world_size: int, rank: int, density: float = 1.0, precision: str = "fp32",
                 overlap: bool = False, **knobs) -> None:
        # Dense sends everything, so its target density is 1 whatever `density` says: a sweep or
        # an experiment file may set sparsifier.density for every method, the baseline included.
        super().__init__(layout, world_size, rank, density=1.0, **knobs)
        self.requested_density = float(density)
        require(precision in PRECISIONS,
                f"sparsifier.precision must be one of {', '.join(PRECISIONS)}, got {precision}: set e.g. sparsifier.precision=bf16")
        require(isinstance(overlap, bool), f"sparsifier.overlap must be true or false, got {overlap!r}")
        # A low-precision all-reduce loses the rounding error; feeding it back would be another
        # method than torch's hooks, which keep none: refused rather than silently ignored.
        require(precision == "fp32" or not self.error_feedback,
                f"sparsifier.error_feedback=true with sparsifier.precision={precision}: the rounding error is not "
                "fed back (torch's compress hooks keep none); set sparsifier.error_feedback=false")
        self.precision = precision
        self.overlap = overlap

    @property
    def wire_dtype(self) -> torch.dtype | None:
        return PRECISIONS[self.precision]

    @property
    def wire_element_bytes(self) -> int:
        dtype = self.wire_dtype
        return FP32_BYTES if dtype is None else torch.finfo(dtype).bits // 8

    def wire_allreduces(self, step: int) -> tuple[WireAllReduce, ...]:
        return (WireAllReduce("values", self.numel, self.wire_element_bytes),)

    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> None:
        return None  # everything

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "precision": self.precision, "overlap": self.overlap,
                "wire_element_bytes": self.wire_element_bytes, "wire_elements": self.numel}
