"""The exchanges of every coordinate: the dense mean all-reduce (optionally rounded to a 16-bit
wire type, the method's `capabilities.WireRounding`) and PowerSGD's low-rank one, whose messages
the method's `capabilities.LowRank` hooks compute while the exchange owns the collectives."""
from __future__ import annotations

import torch

from experiments.engine.core.collectives import RankCollectives
from experiments.engine.core.exchange.result import ExchangeRequest, ExchangeResult
from experiments.engine.core.phases import NO_CLOCK, PhaseClock
from sparsifiers.common.capabilities import LowRank, WireRounding, capable, require


def dense_exchange(request: ExchangeRequest) -> ExchangeResult:
    """ExchangeKind.DENSE: `dense_allreduce` at the method's wire dtype (fp32 for a method
    without `WireRounding`, or when the request names no methods)."""
    methods = request.methods
    wire_dtype = methods[0].wire_dtype if methods and capable(methods[0], WireRounding) else None
    return dense_allreduce(request.accs, request.out, request.comm, request.clock, wire_dtype)


def dense_allreduce(
    accs: list[torch.Tensor], out: torch.Tensor, comm: RankCollectives, clock: PhaseClock = NO_CLOCK,
    wire_dtype: torch.dtype | None = None,
) -> ExchangeResult:
    """agg = mean_r acc_r over the whole vector. With a 16-bit `wire_dtype` h, torch's compress
    hooks' semantics: c_r = round_h(round_h(acc_r) / W) (cast, then divide in h), the sum of the
    c_r carried in fp32 through the run's reduction, agg = round_h(sum) back in fp32; metered at
    h's size (gloo carries the rounded values in fp32 here, the meter counts the wire format)."""
    if wire_dtype is None:
        comm.sum_over_ranks(accs, out)
        out.div_(comm.world_size)
    else:
        # Hidden cost: one full-size temporary per hosted rank (the rounded contribution).
        parts = [acc.to(wire_dtype).div_(comm.world_size).to(out.dtype) for acc in accs]
        comm.sum_over_ranks(parts, out, wire_element_bytes=torch.finfo(wire_dtype).bits // 8)
        out.copy_(out.to(wire_dtype))
    clock.mark("value_exchange")
    numel = out.numel()
    counts = torch.full((comm.world_size,), numel, dtype=torch.int64)
    return ExchangeResult(counts, numel, [None] * len(accs))


def low_rank_allreduce(request: ExchangeRequest) -> ExchangeResult:
    """PowerSGD (sparsifiers/powersgd.py, torch's powerSGD_hook): three all-reduces, of the
    tensors sent whole, of the P_r, of the Q_r; the hooks compute each rank's messages and the
    aggregate. Every coordinate gets a value (|U| = N); `counts` are the elements each rank
    sent; the residual is acc - aggregate (`subtracted`). Before the method's start step,
    torch's vanilla all-reduce instead: sum_r (acc_r / W), divided first as torch divides."""
    methods = require(request.methods, LowRank, "low_rank")
    accs, out, comm, step, clock = request.accs, request.out, request.comm, request.step, request.clock
    world_size, numel = comm.world_size, out.numel()
    if not methods[0].low_rank_active(step):
        comm.sum_over_ranks([acc / world_size for acc in accs], out)
        clock.mark("value_exchange")
        return ExchangeResult(torch.full((world_size,), numel, dtype=torch.int64), numel, [None] * len(accs))
    uncompressed = _summed(comm, [m.low_rank_uncompressed(acc) for m, acc in zip(methods, accs)]).div_(world_size)
    p_sum = _summed(comm, [m.low_rank_p(acc) for m, acc in zip(methods, accs)])
    q = _summed(comm, [m.low_rank_q(acc, p_sum) for m, acc in zip(methods, accs)]).div_(world_size)
    clock.mark("value_exchange")
    for index, method in enumerate(methods):  # identical on every rank: the first writes it
        method.low_rank_decompress(uncompressed, q, out if index == 0 else None)
    clock.mark("scatter")
    sent = uncompressed.numel() + p_sum.numel() + q.numel()
    counts = torch.full((world_size,), sent, dtype=torch.int64)
    return ExchangeResult(counts, numel, [None] * len(accs), subtracted=out)


def _summed(comm: RankCollectives, parts: list[torch.Tensor]) -> torch.Tensor:
    """The sum over ranks of equal-sized messages, in a new tensor. An empty message (a model
    with no tensor sent whole, or none compressed) is not sent: its size is the model's, so
    every rank skips it alike (torch's hook issues it, at a latency the meter leaves out)."""
    if parts[0].numel() == 0:
        return parts[0].clone()
    return comm.sum_over_ranks(parts)
