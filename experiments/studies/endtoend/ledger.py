"""A modelled step's collectives: a run's logged ledger, with the sizes that depend on the worker
count set to what the statistics say at the modelled W.

Only two sizes of most exchanges depend on the data (experiments/engine/core/exchange/):

- union_allreduce: the padded index all-gather is k_max wide (the busiest rank's count) and the
  value all-reduce is |U| long; they are the exchange's last two collectives;
- sparse_allgather: the index and the value all-gathers are both k_max wide, its last two.

gTop-k's tree and Ok-Topk's reduce-scatter have as many rounds as W says (`tree_at_workers`,
`region_at_workers`).

A leader's plan (the payload of its broadcast, the last broadcast of the ledger) takes its
fitted length at W when the statistics carry one (DEFT's allocation grows with W). Every other
collective (the size header where the counts vary, DEFT's averaged norms, CLT-k's and Random-k's k
values, a dense or low-rank all-reduce) keeps the size it was logged with. The template's tail must hold exactly the sizes its run logged for that step, or the exchange
changed shape and this module says so instead of pricing a wrong step.
"""
from __future__ import annotations

from dataclasses import replace

from experiments.engine.core.ledger import Collective
from experiments.engine.core.traffic import TrafficMeter

DATA_DEPENDENT_TAIL = {
    # exchange kind -> the ops of its last collectives, and which statistic sizes each
    "union_allreduce": (("all_gather", "k_max"), ("all_reduce", "union")),
    "sparse_allgather": (("all_gather", "k_max"), ("all_gather", "k_max")),
}


def at_workers(template: tuple[Collective, ...], exchange: str, template_stats: dict[str, int],
               stats: dict[str, float], workers: int) -> list[Collective]:
    """`template` (a logged step's ledger) with its data-dependent sizes set to `stats`
    (k_max and union, rounded) at `workers`; `template_stats` are the values the template was
    logged with. gTop-k's tree (tree_merge) depends on W instead: log2 W rounds of its k pairs;
    Ok-Topk's reduce-scatter (sparse_reduce_scatter) on both: `region_at_workers`."""
    if exchange == "tree_merge":
        return tree_at_workers(template, workers)
    if exchange == "sparse_reduce_scatter":
        return region_at_workers(template, template_stats, stats, workers)
    collectives = list(template)
    if "plan" in stats:
        last = max((i for i, c in enumerate(collectives) if c.op == "broadcast"), default=None)
        if last is not None:
            collectives[last] = replace(collectives[last], elements=max(1, round(stats["plan"])))
    tail = DATA_DEPENDENT_TAIL.get(exchange, ())
    if not tail or (exchange == "union_allreduce" and template_stats["k_max"] == 0):
        return collectives  # nothing depends on W (or nobody selected: no index all-gather was issued)
    start = len(collectives) - len(tail)
    if start < 0:
        raise ValueError(f"a {exchange} ledger of {len(collectives)} collectives cannot end with {tail}")
    for offset, (op, statistic) in enumerate(tail):
        logged = collectives[start + offset]
        if logged.op != op or logged.elements != template_stats[statistic]:
            raise ValueError(
                f"the {exchange} ledger does not end as the exchange issues it: collective {start + offset} is "
                f"{logged.op} of {logged.elements}, expected {op} of {statistic} = {template_stats[statistic]}")
        collectives[start + offset] = replace(logged, elements=max(0, round(stats[statistic])))
    return collectives


def tree_at_workers(template: tuple[Collective, ...], workers: int) -> list[Collective]:
    """A tree_merge ledger (its rounds, then rank 0's broadcast; experiments/engine/core/exchange/tree.py)
    at `workers`: one round of the same k pairs per stride 1, 2, ..., workers / 2, then the
    same broadcast. Its sizes are k's alone, whatever the data."""
    rounds = [c for c in template if c.op == "tree_round"]
    if not rounds or template[-1].op != "broadcast" or workers & (workers - 1):
        raise ValueError(f"a tree_merge ledger ends with its rounds and a broadcast, at a power of 2 workers: "
                         f"got {[c.op for c in template]} at {workers}")
    head = list(template[:template.index(rounds[0])])
    strides = [1 << i for i in range(workers.bit_length() - 1)]
    return head + [replace(rounds[0], root=stride) for stride in strides] + [template[-1]]


def region_at_workers(template: tuple[Collective, ...], template_stats: dict[str, int], stats: dict[str, float],
                      workers: int) -> list[Collective]:
    """An Ok-Topk ledger (experiments/engine/core/exchange/regions.py: [the region proposals' all-reduce],
    the counts' all-to-all, W - 1 shift rounds, the owners' counts, their all-gatherv) at
    `workers`. The rule: a rank's k_max selected pairs spread over the W regions, and the |U|
    kept ones over the W owners, as unevenly as in the template: a round's largest message is
    (the template's mean largest over k_max / W_t) * k_max / W, an owner's largest block (the
    template's over |U| / W_t) * |U| / W. A warm-up step's template (one dense all-reduce)
    stays as it is."""
    rounds = [c for c in template if c.op == "shift_round"]
    gathers = [c for c in template if c.op == "all_gather_v"]
    if not gathers:
        if len(template) == 1 and template[0].op in ("all_reduce", "all_gather"):
            return list(template)  # the dense warm-up (an all-gather under rank_order)
        raise ValueError(f"a sparse_reduce_scatter ledger ends with an all-gatherv: got {[c.op for c in template]}")
    counts = next(c for c in template if c.op == "all_to_all")
    world = len(rounds) + 1
    # Before the counts only a repartition step's proposals: W - 1 boundaries.
    head = [replace(c, elements=workers - 1) for c in template[:template.index(counts)]]
    pair_spread = (sum(c.elements for c in rounds) / len(rounds)) / (template_stats["k_max"] / world) if rounds and template_stats["k_max"] else 1.0
    block_spread = gathers[0].elements / (template_stats["union"] / world) if template_stats["union"] else 1.0
    pair = max(0, round(pair_spread * stats["k_max"] / workers))
    block = max(0, round(block_spread * stats["union"] / workers))
    # The owners' counts: the all-gather after the counts (under rank_order a repartition's
    # proposals are an all-gather too, before them).
    owners = next(c for c in template[template.index(counts) + 1:] if c.op == "all_gather")
    shifts = [Collective("shift_round", pair, rounds[0].element_bytes if rounds else gathers[0].element_bytes, shift)
              for shift in range(1, workers)]
    return head + [counts, *shifts, owners, replace(gathers[0], elements=block, sizes=None)]


def sent_bytes_max(collectives: list[Collective], world_size: int) -> float:
    """Bytes the busiest rank sends for `collectives` among `world_size` ranks: the meter's own
    accounting (experiments/engine/core/traffic.py), replayed."""
    meter = TrafficMeter(world_size)
    for c in collectives:
        if c.op == "broadcast":
            meter.broadcast(c.elements, c.element_bytes, c.root % world_size)
        elif c.op == "point_to_point":
            meter.point_to_point(c.elements, c.element_bytes, c.root % world_size, c.peer % world_size)
        elif c.op == "tree_round":
            meter.tree_round(c.elements, c.element_bytes, c.root)
        elif c.op == "shift_round":  # every rank sends the largest message: an upper bound
            meter.shift_round(None, c.element_bytes, c.root, c.elements)
        elif c.op == "all_gather_v":
            meter.all_gather_v(None, c.element_bytes, c.elements)
        else:
            getattr(meter, c.op)(c.elements, c.element_bytes)
    return float(meter.sent.max())

