"""The union exchange's hosted sum (issue 45 item 5): one buffer of |U| in rank order, not L
gathered copies (up to 2-3 GB at W = 64-256 on ResNet-18), with the same bits as the sum of the
gathered copies it replaced."""
from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from experiments.engine.core.collectives import RankCollectives, sum_in_rank_order

NUMEL, WORKERS = 40_000, 64


class FreshGathers(TorchDispatchMode):
    """Counts index_select calls that allocate their result (not the out= variant)."""

    def __init__(self) -> None:
        super().__init__()
        self.fresh = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._schema.name == "aten::index_select" and func._schema.overload_name == "":
            self.fresh += 1
        return func(*args, **(kwargs or {}))


def ranks_and_union(seed: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    scale = torch.logspace(-6, 6, NUMEL)  # magnitudes far apart: any other order shows in the bits
    accs = [torch.randn(NUMEL, generator=generator) * scale[torch.randperm(NUMEL, generator=generator)]
            for _ in range(WORKERS)]
    return accs, torch.randperm(NUMEL, generator=generator)[: NUMEL // 3].sort().values


@pytest.mark.parametrize("reduction", ["ring", "rank_order"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_buffer_sums_bit_for_bit_as_the_gathered_copies(reduction, seed):
    accs, union = ranks_and_union(seed)
    gathered = [acc.index_select(0, union) for acc in accs]
    old = sum_in_rank_order(gathered[0], gathered)
    comm = RankCollectives(WORKERS, list(range(WORKERS)), use_process_group=False, reduction=reduction)
    with FreshGathers() as counter:
        new = comm.sum_gathered_over_ranks(accs, union)
    assert torch.equal(new, old)
    assert counter.fresh == 1  # one |U| buffer (and one scratch), not W copies
    reversed_order = sum_in_rank_order(None, gathered[::-1])
    assert not torch.equal(reversed_order, old)  # the check can see the order


def test_it_is_metered_as_the_sum_over_ranks_was():
    accs, union = ranks_and_union(3)
    metered = []
    for summed in ("gathered", "one buffer"):
        comm = RankCollectives(WORKERS, list(range(WORKERS)), use_process_group=False)
        if summed == "gathered":
            comm.sum_over_ranks([acc.index_select(0, union) for acc in accs])
        else:
            comm.sum_gathered_over_ranks(accs, union)
        metered.append(comm.meter.sent_bytes if hasattr(comm.meter, "sent_bytes") else vars(comm.meter).copy())
    assert repr(metered[0]) == repr(metered[1])
