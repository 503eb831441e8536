"""The hosted step is light on a GPU (issue 36 item 4): no loop over the W ranks of small kernels
or host syncs in the exchanges, so what a step does besides the ranks' own work does not grow
with W. Counted on the CPU by construction (experiments/engine/core/sync_count.py: the operations a
step dispatches, and among them those that make a GPU's host wait), with the kernels' torch path,
which is the one CUDA runs. The batched accumulation of sparse_allgather adds in rank order bit
for bit like the rank-by-rank loop it replaced, on the CPU always and on CUDA where there is one.
"""
from __future__ import annotations

import pytest
import torch

from experiments.engine.core import sparsify as sparsify_module
from experiments.engine.core.collectives import RankCollectives
from experiments.engine.core.exchange import ExchangeRequest, add_in_order, exchange
from experiments.engine.core.sparsify import sparsify_and_exchange
from experiments.engine.core.sync_count import SyncCounter
from experiments.engine.core.world import init_world
from experiments.studies.benchmarks.step import benchmark_layout, build_method, gaussian_gradient
from sparsifiers.common.exchange_kinds import ExchangeKind
from sparsifiers.common.kernels import set_backend

NUMEL = 20_000
SMALL_W, LARGE_W = 4, 16
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# One method per exchange kind: union (plain, and with DEFT's shared units), sparse_allgather,
# leader_broadcast, shared_allreduce.
METHODS = ("topk", "micro", "exdyna", "deft", "dgc", "cltk", "randomk")
# Exchange syncs, whatever W: the size header's read (a copy on CUDA, not seen on the CPU), the
# union's mask and unique; sparse_allgather's pair positions besides.
MAX_EXCHANGE_SYNCS = 3
# What is still per hosted rank in an exchange: reading its own accumulator (at S_r or U) and
# its term of the sum in rank order.
MAX_OPS_PER_HOSTED_RANK = 2


@pytest.mark.parametrize("device", DEVICES)
def test_one_accumulation_adds_in_rank_order_as_the_rank_by_rank_loop_did(device):
    generator = torch.Generator().manual_seed(0)
    numel, workers, k = 5_000, 16, 800
    indices = torch.stack([torch.randperm(numel, generator=generator)[:k] for _ in range(workers)])
    values = torch.randn(workers, k, generator=generator) * torch.logspace(-8, 8, k)  # far apart: order shows
    counts = torch.randint(k // 2, k + 1, (workers,), generator=generator)
    looped = torch.zeros(numel, device=device)
    for rank in range(workers):
        looped.index_add_(0, indices[rank, :counts[rank]].to(device), values[rank, :counts[rank]].to(device))
    valid = torch.arange(k) < counts[:, None]
    batched = add_in_order(torch.zeros(numel, device=device), indices[valid].to(device), values[valid].to(device))
    assert torch.equal(batched.cpu().view(torch.int32), looped.cpu().view(torch.int32))
    # and not by luck: another order of the same pairs gives other bits
    reversed_order = add_in_order(torch.zeros(numel, device=device), indices[valid].flip(0).to(device),
                                  values[valid].flip(0).to(device))
    assert not torch.equal(reversed_order.cpu(), looped.cpu())


def counted_step(method: str, workers: int) -> tuple[SyncCounter, SyncCounter, SyncCounter]:
    """One settled hosted step of `method` at W: counters of the whole of phases 2-5, of the
    exchange alone, and of the ranks' selections."""
    set_backend("torch")  # the path CUDA runs
    try:
        world = init_world(workers, "cpu", "gloo", 60)
        layout = benchmark_layout(NUMEL)
        sparsifiers = [build_method(method, workers, 0.01, layout, rank) for rank in range(workers)]
        accs = [gaussian_gradient(NUMEL, 1e-2, rank, 0) for rank in range(workers)]
        out = torch.zeros(NUMEL)
        for step in range(3):
            sparsify_and_exchange(world, sparsifiers, accs, out, step)
        exchange, selections = SyncCounter(), SyncCounter()
        real_exchange = sparsify_module.exchange

        def counted_exchange(*args, **kwargs):
            with exchange:
                return real_exchange(*args, **kwargs)

        for sparsifier in sparsifiers:
            real_select = sparsifier.select

            def counted_select(*args, _select=real_select, **kwargs):
                with selections:
                    return _select(*args, **kwargs)

            sparsifier.select = counted_select
        sparsify_module.exchange = counted_exchange
        try:
            with SyncCounter() as whole:
                sparsify_and_exchange(world, sparsifiers, accs, out, 3)
        finally:
            sparsify_module.exchange = real_exchange
        return whole, exchange, selections
    finally:
        set_backend("auto")


@pytest.mark.parametrize("method", METHODS)
def test_a_hosted_exchange_makes_as_many_host_syncs_at_w16_as_at_w4(method):
    small, large = counted_step(method, SMALL_W), counted_step(method, LARGE_W)
    (_, small_exchange, small_select), (whole, large_exchange, large_select) = small, large
    assert large_exchange.syncs == small_exchange.syncs <= MAX_EXCHANGE_SYNCS, (large_exchange.sync_ops, small_exchange.sync_ops)
    extra_ranks = LARGE_W - SMALL_W
    assert large_exchange.ops - small_exchange.ops <= MAX_OPS_PER_HOSTED_RANK * extra_ranks, large_exchange.op_names
    # Outside the ranks' own selections, the step's syncs do not grow with W either.
    outside_small = small[0].syncs - small_select.syncs
    outside_large = whole.syncs - large_select.syncs
    assert outside_large == outside_small, (whole.sync_ops, large_select.sync_ops)


@pytest.mark.parametrize("kind", [ExchangeKind.UNION_ALLREDUCE, ExchangeKind.SPARSE_ALLGATHER])
def test_known_counts_make_an_exchange_lighter_not_heavier(kind):
    """Counts every rank knows (Top-k's k) replace the size header: no all-gather of it and no
    read of it (on CUDA, its copy back to the host), so no more syncs and fewer operations."""
    workers, k = SMALL_W, 50
    generator = torch.Generator().manual_seed(0)
    selections = [torch.randperm(NUMEL, generator=generator)[:k].sort().values for _ in range(workers)]
    accs = [torch.randn(NUMEL, generator=generator) for _ in range(workers)]
    counted = {}
    for known in (None, [k] * workers):
        comm = RankCollectives(workers, list(range(workers)), use_process_group=False)
        with SyncCounter() as counter:
            exchange(kind, ExchangeRequest(selections, accs, torch.empty(NUMEL), comm, counts=known))
        counted[known is None] = counter
    with_header, without = counted[True], counted[False]
    assert without.syncs <= with_header.syncs and without.ops < with_header.ops, (without.op_names, with_header.op_names)
