"""Plain references for one recorded step (tests/helpers/step_recorder.py), written from the documented
semantics (docs/algorithms.md "Exchange kinds", docs/metrics.md) and not from the code under test:

- `expected_exchange`: the aggregate, each rank's zeroed set and the counts, in float64;
- `expected_collectives`: the collectives the step must issue, padding and size headers included
  (DEFT's units, plan and common units by `deft_units`, `plan_length`, `deft_common_coordinates`;
  which methods' counts every rank knows, so that no size header travels, by `sends_size_header`);
- `ring_bytes`: each rank's bytes sent and received for a list of collectives (ring all-gather and
  all-reduce, binomial-tree broadcast, gTop-k's tree rounds, Ok-Topk's shift rounds and ring
  all-gatherv);
- `OkTopkReplay`: Ok-Topk's selections, regions, thresholds and exchange, replayed step by step
  (the released variant and the paper's);
- `expected_exchange_metrics`: traffic, density, build-up and selection shape of the step;
- `modelled_ms`: the alpha-beta model's time for a list of collectives.

The methods' exchange kind and selection scope are written here by name, so a method that
declares the wrong one fails too.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from experiments.runformat import metric_keys as keys
from experiments.engine.core.collectives import RankCollectives  # the code under test: `hosted_exchange` drives it
from experiments.engine.core.exchange import ExchangeRequest, exchange
from experiments.engine.core.ledger import Collective
from sparsifiers.common.exchange_kinds import ExchangeKind
from tests.helpers.step_recorder import RecordedStep

INDEX_BYTES = 4  # indices travel as int32
PAIR_BYTES = 8  # an int32 index and a float32 value, packed (gTop-k's and Ok-Topk's messages)
VALUE_BYTES = 4  # float32 accumulators

# docs/algorithms.md: which exchange each method uses, and which split the choosing among ranks.
EXCHANGE_OF = {"dense": "dense", "dense_bf16": "dense", "dense_fp16": "dense", "dense_overlap": "dense",
               "dgc": "sparse_allgather", "sidco": "sparse_allgather", "cltk": "leader_broadcast", "randomk": "shared_allreduce", "powersgd": "low_rank",
               "accordion": "sparse_allgather", "gtopk": "tree_merge", "oktopk": "sparse_reduce_scatter"}
# The dense presets' wire types (docs/algorithms.md, "dense_bf16"): the aggregate is rounded to it,
# the all-reduce metered at its size.
WIRE_DTYPE_OF = {"dense_bf16": torch.bfloat16, "dense_fp16": torch.float16}
SPLIT_METHODS = {"deft", "micro", "exdyna", "cltk"}
# docs/algorithms.md ("Exchange kinds", "Sizes every rank knows"): the methods whose every |S_r|
# every rank knows before the exchange, so that it sends no size header: Top-k (k), Accordion
# (the shared plan's sum of K_l) and DEFT with norms=global (the shared k_l and plan).
KNOWN_COUNT_METHODS = {"topk", "accordion"}


def sends_size_header(spec: str) -> bool:
    """Whether the union or sparse all-gather exchange of `spec` all-gathers the counts first."""
    method, *knobs = spec.split(":")
    if method == "deft":
        return "norms=global" not in knobs
    return method not in KNOWN_COUNT_METHODS


def exchange_of(spec: str) -> str:
    method, *knobs = spec.split(":")
    return "sparse_allgather" if "exchange=sparse_allgather" in knobs else EXCHANGE_OF.get(method, "union_allreduce")


@dataclass
class ExpectedExchange:
    aggregate: torch.Tensor  # float64
    exchanged: torch.Tensor  # bool [N]: where the aggregate may be non-zero
    zeroed: list[torch.Tensor]  # per hosted rank, bool [N]: residual coordinates that must be 0
    counts: list[int]  # every rank's |S_r| as the exchange reports it
    union: int  # |U|, common units included
    selected: int  # |U| without the common units


def hosted_exchange(kind: ExchangeKind, pairs_by_rank: list[dict[int, float]], numel: int, **kwargs):
    """Runs the exchange `kind` on ranks, all hosted in one process, whose selections and
    accumulator values are `pairs_by_rank` (acc is 0 elsewhere); `kwargs` go to `exchange`
    (methods, step). Returns the aggregate, the result and the traffic meter."""
    world_size = len(pairs_by_rank)
    selections = [torch.tensor(sorted(pairs), dtype=torch.int64) for pairs in pairs_by_rank]
    accs = [torch.zeros(numel) for _ in range(world_size)]
    for acc, pairs in zip(accs, pairs_by_rank):
        for index, value in pairs.items():
            acc[index] = value
    comm = RankCollectives(world_size, list(range(world_size)), use_process_group=False)
    out = torch.full((numel,), float("nan"))
    result = exchange(kind, ExchangeRequest(selections, accs, out, comm, **kwargs))
    return out, result, comm.meter


def _mask(numel: int, indices: torch.Tensor) -> torch.Tensor:
    mask = torch.zeros(numel, dtype=torch.bool)
    mask[indices] = True
    return mask


def low_rank_sizes(shapes: list[tuple[int, ...]], rank: int = 2, min_rate: float = 2.0) -> list[int]:
    """PowerSGD's three messages (docs/algorithms.md, "powersgd", step 2), by hand: M is n x m
    (the tensor viewed as shape[0] rows), r' = min(n, m, r), compressed iff (n + m) r' * rate
    < n m; the rest (and 0-d tensors) sent whole. [whole, P, Q] elements, empty ones not sent.
    The defaults are conf/sparsifier/powersgd.yaml's."""
    whole = p = q = 0
    for shape in shapes:
        numel = math.prod(shape)
        n = shape[0] if shape else 0
        m = numel // n if n else 0
        r = min(n, m, rank)
        if shape and (n + m) * r * min_rate < n * m:
            p, q = p + n * r, q + m * r
        else:
            whole += numel
    return [size for size in (whole, p, q) if size]


def wire_dtype_of(spec: str) -> torch.dtype | None:
    method, *knobs = spec.split(":")
    named = {"precision=bf16": torch.bfloat16, "precision=fp16": torch.float16}
    return next((named[k] for k in knobs if k in named), WIRE_DTYPE_OF.get(method))


def expected_exchange(step: RecordedStep, kind: str, wire_dtype: torch.dtype | None = None) -> ExpectedExchange:
    """Needs every rank of the world in `step` (a process hosting all W, or the records of all
    processes merged by `merge_processes`). `wire_dtype`: dense's bf16/fp16, each contribution
    round_h(round_h(acc_r) / W) (divided in h, as torch's hook), their sum rounded to h.
    `low_rank` (PowerSGD): only what the record alone fixes: every coordinate is aggregated,
    each rank's counts are its messages' sizes (checked against the layout elsewhere)."""
    accs = [acc.double() for acc in step.accs]
    numel, world_size = accs[0].numel(), step.world_size
    assert len(accs) == world_size
    mean = torch.stack(accs).mean(0)
    if kind in ("dense", "low_rank"):
        everything = torch.ones(numel, dtype=torch.bool)
        if wire_dtype is not None:
            parts = [(acc.to(wire_dtype).float() / world_size).to(wire_dtype).double() for acc in step.accs]
            mean = torch.stack(parts).sum(0).to(wire_dtype).double()
        counts = step.counts if kind == "low_rank" else [numel] * world_size
        return ExpectedExchange(mean, everything, [everything] * world_size, counts, numel, numel)
    if kind == "sparse_allgather":
        aggregate = torch.zeros(numel, dtype=torch.float64)
        for selection, acc in zip(step.selections, accs):
            aggregate[selection] += acc[selection] / world_size
        own = [_mask(numel, s) for s in step.selections]
        union = torch.stack(own).any(0)
        return ExpectedExchange(aggregate, union, own, [s.numel() for s in step.selections], int(union.sum()), int(union.sum()))
    if kind == "tree_merge":
        final = gtopk_tree(step.selections, step.accs)
        exchanged = _mask(numel, torch.tensor(sorted(final), dtype=torch.int64))
        aggregate = torch.zeros(numel, dtype=torch.float64)
        for index, value in final.items():
            aggregate[index] = float(value) / world_size
        own = [_mask(numel, s) & exchanged for s in step.selections]
        return ExpectedExchange(aggregate, exchanged, own, [s.numel() for s in step.selections], len(final), len(final))
    if kind == "leader_broadcast":  # every rank holds the leader's broadcast indices
        indices, counts = step.plan, [0] * world_size
        counts[step.leader] = indices.numel()
    elif kind == "shared_allreduce":  # one draw every rank makes alike
        indices = step.selections[0]
        assert all(torch.equal(s, indices) for s in step.selections)
        counts = [indices.numel()] * world_size
    else:  # union_allreduce: the union of the selections, then the common units
        indices = torch.cat(step.selections)
        counts = [s.numel() for s in step.selections]
    selected = _mask(numel, indices)
    exchanged = selected | (_mask(numel, step.shared) if step.shared is not None else selected)
    aggregate = torch.where(exchanged, mean, torch.zeros_like(mean))
    return ExpectedExchange(aggregate, exchanged, [exchanged] * world_size, counts, int(exchanged.sum()), int(selected.sum()))


def gtopk_tree(selections: list[torch.Tensor], accs: list[torch.Tensor]) -> dict[int, np.float32]:
    """docs/algorithms.md, gtopk, replayed as the released `gtopk_sparse_allreduce` computes in
    numpy: rank r's k pairs (index: acc_r[index], float32); rounds s = 1, 2, ...: rank r (a
    multiple of 2s) takes rank r + s's pairs, which the sender rounded to float32 (`values.astype(
    np.float32)` into its float64 message) and which arrive in a float64 receive buffer. The
    receiver adds them to its own values at a common index in place (`values[c1] += ...`: in
    float32 while its list is still its own float32 values, in float64 once a merge has made it
    the concatenation of its values and the float64 buffer) and keeps the k largest |value| of
    the float64 concatenation, the lower index first on a tie (the released tie order is
    numpy's). Rank 0's pairs at the end, rounded to float32."""
    k = selections[0].numel()
    lists = [(selection.numpy().astype(np.int64), acc[selection].numpy().astype(np.float32))
             for selection, acc in zip(selections, accs)]
    stride = 1
    while stride < len(lists):
        for rank in range(0, len(lists), 2 * stride):
            indexes, values = lists[rank][0], lists[rank][1].copy()
            incoming_indexes, sent = lists[rank + stride]
            received = sent.astype(np.float32).astype(np.float64)  # the sender's float32 message, in float64
            _, own, other = np.intersect1d(indexes, incoming_indexes, assume_unique=True, return_indices=True)
            values[own] += received[other]  # float32 at a receiver's first merge, float64 after
            alone = np.ones(k, dtype=bool)
            alone[other] = False  # the released code zeroes the incoming copy; here it leaves the list
            candidates = np.concatenate((indexes, incoming_indexes[alone]))
            sums = np.concatenate((values, received[alone]))  # float64 from here on
            kept = np.lexsort((candidates, -np.abs(sums)))[:k]
            lists[rank] = (candidates[kept], sums[kept])
        stride *= 2
    return {int(index): np.float32(value) for index, value in zip(*lists[0])}


# conf/sparsifier/oktopk.yaml's schedule and density, by hand.
OKTOPK_DEFAULTS = {"density": 0.01, "warmup_steps": 128, "threshold_every": 32, "regions_every": 64,
                   "recompute_residual": "released", "variant": "released"}
OKTOPK_WORDS = ("recompute_residual", "variant")  # the knobs whose values are words


class OkTopkReplay:
    """docs/algorithms.md, oktopk, steps 1-7, replayed over a run's recorded steps in order (the
    thresholds and regions carry over): the sums in numpy float32, the thresholds Python floats
    (float64) rounded to float32 only where a float32 tensor meets them, as the released code does:
    `selections` are what each rank must select, `exchange` the aggregate, residuals and counts,
    `collectives` what the step must issue. variant=paper: the k largest |acc| selected, the
    owners' exact top-k, its search and the balancing (`_paper_gather`), the intersection."""

    def __init__(self, spec: str, numel: int, world_size: int) -> None:
        knobs = dict(OKTOPK_DEFAULTS)
        for knob in spec.split(":")[1:]:
            key, _, value = knob.partition("=")
            if key in knobs:
                knobs[key] = float(value) if key == "density" else value if key in OKTOPK_WORDS else int(value)
        self.k = math.floor(knobs["density"] * numel)
        self.paper = knobs["variant"] == "paper"
        self.warmup, self.every, self.regions_every = knobs["warmup_steps"], knobs["threshold_every"], knobs["regions_every"]
        self.released_lookup = knobs["recompute_residual"] == "released"
        self.numel, self.world_size = numel, world_size
        self.local = [0.0] * world_size
        self.glob = 0.0
        self.bounds = [0] + [numel] * world_size

    def _due(self, t: int, every: int) -> bool:
        return t >= self.warmup and (t - self.warmup) % every == 0

    def selections(self, step: RecordedStep) -> list[torch.Tensor | None]:
        """Steps 1-3 for every rank (and the stored local thresholds for the next step)."""
        if step.step < self.warmup:
            return [None] * self.world_size
        chosen = []
        for rank, acc in enumerate(step.accs):
            magnitude = np.abs(acc.numpy())
            if self.paper:  # exactly the k largest |acc|, the lower index first on a tie; ascending
                by_magnitude = np.lexsort((np.arange(magnitude.size), -magnitude))
                chosen.append(torch.from_numpy(np.sort(by_magnitude[:self.k])).long())
                continue
            if self._due(step.step, self.every):
                th = float(np.sort(magnitude)[::-1][self.k - 1])  # the k-th largest
            else:
                th = self.local[rank]
                for _ in range(5):
                    if np.count_nonzero(magnitude > np.float32(th)) <= 3 * self.k // 2:
                        break
                    th = th * 1.03
            selected = np.nonzero(magnitude > np.float32(th))[0]
            if len(selected) < 0.75 * self.k:
                th = th / 1.012
            elif len(selected) > 1.25 * self.k:
                th = th * 1.012
            self.local[rank] = th
            chosen.append(torch.from_numpy(selected).long())
        return chosen

    def exchange(self, step: RecordedStep, reduction: str = "ring") -> tuple[ExpectedExchange, list[Collective]]:
        """Steps 4-7 on the recorded selections, and the collectives they issue (the warm-up's
        values and the region proposals are summed by an all-reduce, or by an all-gather under
        `reduction` rank_order)."""
        W, numel, t = self.world_size, self.numel, step.step
        summed = "all_reduce" if reduction == "ring" else "all_gather"
        if step.step < self.warmup:
            return expected_exchange(step, "dense"), [Collective(summed, numel, VALUE_BYTES)]
        selections = [s.numpy() for s in step.selections]
        accs = [acc.numpy() for acc in step.accs]
        issued = []
        if self._due(t, self.regions_every):
            proposals = []
            for s in selections:
                c = len(s) // W
                proposals.append([int(s[i * c]) if len(s) else i * numel // W for i in range(1, W)])
            self.bounds = [0] + [sum(p[i] for p in proposals) // W for i in range(W - 1)] + [numel]
            issued.append(Collective(summed, W - 1, 8))
        region = [[[int(p) for p in s if self.bounds[j] <= p < self.bounds[j + 1]] for j in range(W)] for s in selections]
        issued.append(Collective("all_to_all", 1, INDEX_BYTES))
        for shift in range(1, W):
            sizes = tuple(len(region[r][(r + shift) % W]) for r in range(W))
            issued.append(Collective("shift_round", max(sizes), PAIR_BYTES, shift, sizes=sizes))
        recompute = self._due(t, self.every)
        gathered: list[tuple[int, np.float32]] = []
        blocks = []
        owner_sums: list[dict[int, np.float32]] = []
        for owner in range(W):
            sums: dict[int, np.float32] = {}
            for shift in range(W):  # sources owner, owner - 1, ... (the released order)
                source = (owner - shift) % W
                for p in region[source][owner]:
                    sums[p] = np.float32(sums.get(p, np.float32(0.0)) + accs[source][p])
            owner_sums.append(sums)
            kept = [(p, v) for p, v in sorted(sums.items()) if (v != 0 if recompute else abs(v) > np.float32(self.glob))]
            blocks.append(len(kept))
            gathered += kept
        if self.paper:
            gathered = self._paper_gather(owner_sums, issued, summed)
        else:
            issued += [Collective("all_gather", 1, INDEX_BYTES),
                       Collective("all_gather_v", max(blocks), PAIR_BYTES, sizes=tuple(blocks))]
        if self.paper:
            pass  # th_glob was set by the search; the residual is the intersection
        elif recompute:
            gathered = sorted(gathered, key=lambda pair: (-abs(pair[1]), pair[0]))[:min(len(gathered), self.k)]
            if gathered:
                self.glob = float(abs(gathered[-1][1]))
        elif len(gathered) < 0.75 * self.k:
            self.glob = self.glob / 1.01
        elif len(gathered) > 1.25 * self.k:
            self.glob = self.glob * 1.008
        aggregate = torch.zeros(numel, dtype=torch.float64)
        for p, v in gathered:
            aggregate[p] = float(np.float32(v / np.float32(W)))
        exchanged = _mask(numel, torch.tensor([p for p, _ in gathered], dtype=torch.int64))
        zeroed = [_mask(numel, s) & exchanged for s in step.selections]
        if recompute and self.released_lookup and gathered and not self.paper:  # the released intersect1d_searchsorted on the top-k by magnitude
            order = np.array([p for p, _ in gathered], dtype=np.int64)
            for rank, s in enumerate(selections):
                found = np.searchsorted(order, s.astype(np.int64))
                found[found == len(order)] = 0
                zeroed[rank] = _mask(numel, torch.from_numpy(s[order[found] == s]).long())
        counts = [len(s) for s in selections]
        return ExpectedExchange(aggregate, exchanged, zeroed, counts, len(gathered), len(gathered)), issued


    def _paper_gather(self, owner_sums: list[dict[int, np.float32]], issued: list[Collective], summed: str) -> list[tuple[int, np.float32]]:
        """variant=paper, steps 5-6 (docs/algorithms.md): the owners keep exactly the k largest
        |sum| of all regions (ties: the lower index; every non-zero sum if fewer), found by a
        binary search over the float32 bits of the k-th magnitude t in [1, 2^31): one int64
        count summed over the ranks first (is any t >= the smallest positive float at all?), then
        one per probe; an all-gather of each owner's two counts (above t, at t); the size
        header; the balancing, the kept pairs in rank order cut again into W blocks of
        floor(G / W) (one more for the first G mod W) and each piece sent to its new holder in
        shift rounds; the all-gatherv of the balanced blocks. Sets th_glob to t."""
        W, k = self.world_size, self.k
        every = sorted(((p, v) for sums in owner_sums for p, v in sums.items() if v != 0), key=lambda pair: (-abs(pair[1]), pair[0]))
        gathered = sorted(every[:k])
        probes = 1
        if len(every) >= k:
            kth = np.float32(abs(every[k - 1][1]))
            self.glob = float(kth)
            bits = int(np.array([kth], dtype=np.float32).view(np.int32)[0])
            low, high = 1, 1 << 31  # count(>= low) >= k holds, count(>= high) < k
            while high - low > 1:
                middle = (low + high) // 2
                probes += 1
                low, high = (middle, high) if middle <= bits else (low, middle)
            assert low == bits
        issued += [Collective(summed, 1, 8)] * probes + [Collective("all_gather", 2, 8), Collective("all_gather", 1, INDEX_BYTES)]
        holder = [j for j, sums in enumerate(owner_sums) for p, _ in gathered if p in sums]  # each kept pair's owner, in order
        total = len(gathered)
        balanced = [total // W + (i < total % W) for i in range(W)]
        new_holder = [i for i in range(W) for _ in range(balanced[i])]
        for shift in range(1, W):
            sizes = tuple(sum(1 for a, b in zip(holder, new_holder) if a == r and b == (r + shift) % W) for r in range(W))
            issued.append(Collective("shift_round", max(sizes), PAIR_BYTES, shift, sizes=sizes))
        issued.append(Collective("all_gather_v", max(balanced), PAIR_BYTES, sizes=tuple(balanced)))
        return gathered


def oktopk_replayed(steps: list[RecordedStep], spec: str, reduction: str = "ring") -> list[tuple[list, ExpectedExchange, list[Collective]]]:
    """Per recorded step (a run's, in order, from its first step): what every rank must select,
    the exchange's expectation and its collectives."""
    replay = OkTopkReplay(spec, steps[0].accs[0].numel(), steps[0].world_size)
    assert steps[0].step == 0, "the replay starts from the run's first step"
    return [(replay.selections(step), *replay.exchange(step, reduction)) for step in steps]


def deft_units(sizes: list[int], world_size: int) -> list[tuple[int, int]]:
    """docs/algorithms.md, DEFT step 1: the model's tensors in order; one of more than N / W
    elements is cut into W contiguous pieces whose sizes differ by at most one (the first
    N mod W one larger), any other is one unit; empty pieces are no unit. (start, end) each."""
    numel, units, offset = sum(sizes), [], 0
    for size in sizes:
        pieces = [size // world_size + (piece < size % world_size) for piece in range(world_size)] if size * world_size > numel else [size]
        for length in pieces:
            if length:
                units.append((offset, offset + length))
            offset += length
    return units


def plan_length(spec: str, step: RecordedStep, sizes: list[int], density: float) -> int:
    """The leader's plan in elements: DEFT's W bin sizes, the number of common units, then every
    unit once (in a bin or common); CLT-k's top-k indices, k = floor(d N); Accordion's one choice
    per parameter (k_low or k_high)."""
    if spec.split(":")[0] == "deft":
        return step.world_size + 1 + len(deft_units(sizes, step.world_size))
    if spec.split(":")[0] == "accordion":
        return len(sizes)
    return max(1, math.floor(density * sum(sizes)))


def deft_common_coordinates(step: RecordedStep, sizes: list[int]) -> torch.Tensor:
    """The coordinates of the common units the broadcast plan names (after its W bin sizes, its
    common count and the W bins' units), sorted."""
    plan, world_size = step.plan.tolist(), step.world_size
    in_bins = sum(plan[:world_size])
    common = plan[world_size + 1 + in_bins:]
    assert len(common) == plan[world_size]
    units = deft_units(sizes, world_size)
    ranges = [torch.arange(*units[unit]) for unit in common]
    return torch.sort(torch.cat(ranges)).values if ranges else torch.empty(0, dtype=torch.int64)


def expected_collectives(step: RecordedStep, kind: str, expected: ExpectedExchange, averaged: int = 0,
                         plan: int = 0, reduction: str = "ring", averaged_bytes: int = VALUE_BYTES,
                         wire_bytes: int = VALUE_BYTES, low_rank_sizes: list[int] | None = None,
                         size_header: bool = True) -> list[Collective]:
    """In the order issued: the averaged inputs (`averaged` elements of `averaged_bytes` each:
    DEFT's float32 norms, a calibrated threshold start's float64), the leader's plan (its `plan`
    int32 elements alone: every leader's plan has a length every rank knows, `plan_length`),
    then the exchange (the counts header when `size_header`, indices padded to the largest
    count, values). `rank_order` sums by an all-gather of every rank's values."""
    def summed(elements: int, element_bytes: int = VALUE_BYTES) -> Collective:
        return Collective("all_reduce" if reduction == "ring" else "all_gather", elements, element_bytes)

    issued = []
    if averaged:
        issued.append(summed(averaged, averaged_bytes))
    if step.leader is not None:
        issued.append(Collective("broadcast", plan, INDEX_BYTES, step.leader))
    width = max(expected.counts)
    if kind == "dense":
        issued.append(summed(step.accs[0].numel(), wire_bytes))
    elif kind == "low_rank":  # PowerSGD: the messages' sizes, from the method's own declaration
        issued += [summed(size) for size in low_rank_sizes or [step.accs[0].numel()]]
    elif kind == "sparse_allgather":
        if size_header:
            issued.append(Collective("all_gather", 1, INDEX_BYTES))
        issued += [Collective("all_gather", width, INDEX_BYTES), Collective("all_gather", width, VALUE_BYTES)]
    elif kind == "union_allreduce":
        if size_header:
            issued.append(Collective("all_gather", 1, INDEX_BYTES))
        if width:  # every unit common: nobody has indices to send
            issued.append(Collective("all_gather", width, INDEX_BYTES))
        issued.append(summed(expected.union))
    elif kind == "tree_merge":  # one message of k (index, value) pairs a round; rank 0's pairs broadcast, no header
        stride = 1
        while stride < step.world_size:
            issued.append(Collective("tree_round", width, INDEX_BYTES + VALUE_BYTES, stride))
            stride *= 2
        issued.append(Collective("broadcast", expected.union, INDEX_BYTES + VALUE_BYTES, 0))
    else:  # leader_broadcast, shared_allreduce: the ranks already hold the index set
        issued.append(summed(expected.union))
    return issued


def modelled_ms(collectives: list[Collective], world_size: int, latency_us: float, bandwidth_gbit: float) -> float:
    """The alpha-beta model (docs/metrics.md, time/exchange_model_ms): a message of n bytes costs
    alpha + n / beta; ring all-gather of m bytes per rank (W-1) messages of m, ring all-reduce of
    n bytes 2(W-1) messages of n / W, binomial-tree broadcast ceil(log2 W) messages of n."""
    def message(nbytes: float) -> float:
        return latency_us * 1e-6 + nbytes / (bandwidth_gbit * 1e9 / 8)

    total = 0.0
    for c in collectives:
        size = c.elements * c.element_bytes
        if c.op in ("all_gather", "all_to_all"):  # all-to-all: one rank per node, W - 1 messages in turn
            total += (world_size - 1) * message(size)
        elif c.op == "all_reduce":
            total += 2 * (world_size - 1) * message(size / world_size)
        elif c.op in ("tree_round", "shift_round"):  # its messages travel at once: the largest decides
            total += message(size)
        elif c.op == "all_gather_v":  # a ring: every step as slow as the largest block
            total += (world_size - 1) * message(size)
        else:
            total += math.ceil(math.log2(world_size)) * message(size)
    return total * 1e3


def binomial_children(relative: int, world_size: int) -> list[int]:
    """Relative ranks a binomial-tree broadcast's `relative` rank forwards to: r + 2^j for every
    2^j above r (the subtree r roots), within the world."""
    return [relative + 2 ** j for j in range(world_size.bit_length()) if 2 ** j > relative and relative + 2 ** j < world_size]


def ring_bytes(collectives: list[Collective], world_size: int) -> tuple[np.ndarray, np.ndarray]:
    sent, recv = np.zeros(world_size), np.zeros(world_size)
    for c in collectives:
        size = c.elements * c.element_bytes
        if c.op in ("all_gather", "all_to_all"):  # every rank sends its m to (all-to-all: a different m to) each other
            sent += (world_size - 1) * size
            recv += (world_size - 1) * size
        elif c.op == "all_reduce":
            sent += 2 * (world_size - 1) / world_size * size
            recv += 2 * (world_size - 1) / world_size * size
        elif c.op == "tree_round":  # every rank r with r mod 2s = s sends to r - s
            for rank in range(c.root, world_size, 2 * c.root):
                sent[rank] += size
                recv[rank - c.root] += size
        elif c.op == "shift_round":  # rank r sends its own size to r + s
            for rank in range(world_size):
                sent[rank] += c.sizes[rank] * c.element_bytes
                recv[(rank + c.root) % world_size] += c.sizes[rank] * c.element_bytes
        elif c.op == "all_gather_v":  # a ring: rank r forwards every block but its successor's
            total = sum(c.sizes)
            for rank in range(world_size):
                sent[rank] += (total - c.sizes[(rank + 1) % world_size]) * c.element_bytes
                recv[rank] += (total - c.sizes[rank]) * c.element_bytes
        else:
            for rank in range(world_size):
                relative = (rank - c.root) % world_size
                sent[rank] += len(binomial_children(relative, world_size)) * size
                recv[rank] += size if relative else 0
    return sent, recv


def expected_exchange_metrics(step: RecordedStep, spec: str, expected: ExpectedExchange, sent: np.ndarray,
                              recv: np.ndarray, density_target: float, k_target: int | None = None) -> dict[str, float]:
    """docs/metrics.md, from the step's own counts: density and its error against the step's
    target k = floor(density * N) (at least 1; or `k_target` where the method's target is a count,
    Accordion's sum of K_l), build-up |U \\ C| over the mean selection (or over the sum of the split
    selections), overlap, k, and the padding the index all-gather pays."""
    numel, world_size = step.accs[0].numel(), step.world_size
    counts = expected.counts
    total = sum(counts)
    k_target = max(1, math.floor(density_target * numel)) if k_target is None else k_target
    split = spec.split(":")[0] in SPLIT_METHODS
    dense_bytes = 2 * (world_size - 1) / world_size * numel * VALUE_BYTES
    padded = exchange_of(spec) in ("union_allreduce", "sparse_allgather")
    # PowerSGD selects nothing: as dense, every rank counts N against build-up and overlap
    # (docs/metrics.md); its counts are the elements it sent.
    chosen = [numel] * world_size if exchange_of(spec) == "low_rank" else counts
    total_chosen = sum(chosen)
    return {
        keys.SENT_MAX: sent.max(), keys.SENT_MEAN: sent.mean(), keys.RECV_MAX: recv.max(), keys.RECV_MEAN: recv.mean(),
        keys.DENSE_BYTES: dense_bytes, keys.RATIO: sent.mean() / dense_bytes,
        keys.DENSITY_ACTUAL: expected.union / numel, keys.DENSITY_TARGET: density_target,
        keys.DENSITY_ERROR: expected.union / k_target - 1,
        keys.BUILDUP: expected.selected / (total_chosen if split else total_chosen / world_size),
        keys.OVERLAP: total_chosen / expected.selected,
        keys.K_MAX: max(counts), keys.K_MEAN: total / world_size,
        keys.LOAD_IMBALANCE: world_size * max(counts) / total - 1 if padded else 0.0,
    }
