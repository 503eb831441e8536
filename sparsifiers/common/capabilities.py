"""What only some methods do: capabilities, as `typing.Protocol`s.

`sparsifiers/common/base.py` holds what every method implements. A method that needs more from the
world implements one of the protocols below, structurally (it defines the members; it does not
inherit them): the step (experiments/engine/core/sparsify.py) and the exchange (experiments/engine/core/exchange/)
ask `capable(method, Protocol)` and call the hooks only then; nothing else has default no-ops.

| protocol         | who                    | what the world does with it                          |
|------------------|------------------------|------------------------------------------------------|
| `AveragedInputs` | DEFT, MiCRO, ExDyna    | averages a small tensor over ranks before the plan   |
| `LeaderPlan`     | CLT-k, DEFT, Accordion | broadcasts one rank's plan before every rank selects |
| `SharedIndices`  | DEFT                   | adds coordinates to the union without their indices  |
| `LowRank`        | PowerSGD               | the low_rank exchange's messages and aggregate       |
| `RegionOwner`    | Ok-Topk                | the sparse_reduce_scatter exchange's regions         |
| `FixedMessages`  | dense, PowerSGD        | prices the exchange at any W from the model alone    |
| `WireRounding`   | dense                  | rounds the dense exchange's messages to 16 bits      |

A capability is a property of the class: hooks that return None at some steps (Accordion's
`plan_leader` between detections, DEFT's `averaged_inputs` with `norms=local`) still implement
it, and a subclass inherits its parent's. A class defining some members of a protocol but not
all is an error (`capable` raises), not a silent no.
"""
from __future__ import annotations

from functools import cache
from typing import Protocol, runtime_checkable

import torch

from sparsifiers.common.exchange_kinds import WireAllReduce


@runtime_checkable
class AveragedInputs(Protocol):
    """A small tensor every rank contributes before the plan, averaged over ranks by the world
    (one metered allreduce). DEFT's `norms=global` averages unit norms here, MiCRO's and
    ExDyna's `threshold_start=calibrated` the first step's k-th largest |acc|."""

    def averaged_inputs(self, acc: torch.Tensor, step: int) -> torch.Tensor | None:
        """A small 1-D float tensor this rank contributes at `step`; the world averages it over
        ranks and hands the mean to `receive_average` on every rank. None: nothing to average at
        this step (the same answer on every rank)."""

    def receive_average(self, mean: torch.Tensor, step: int) -> None:
        """The mean over ranks of `averaged_inputs`, identical on every rank, before the plan."""


@runtime_checkable
class LeaderPlan(Protocol):
    """A rank whose plan every rank needs before selecting (DEFT's bins, CLT-k's indices,
    Accordion's detection): the leader makes it, the world broadcasts it as int32 and every
    rank's `select` receives it (int64) as `plan`."""

    def plan_leader(self, step: int) -> int | None:
        """The rank whose plan every rank needs before selecting at `step`, or None: no plan at
        this step (the same answer on every rank)."""

    def make_plan(self, acc: torch.Tensor, step: int) -> torch.Tensor:
        """Called on the leader only: a 1-D int64 tensor the world broadcasts to all ranks."""

    def plan_length(self, step: int) -> int | None:
        """The number of elements of `make_plan`'s plan at `step` when every rank knows it before
        the broadcast (then the plan travels alone, and a plan of another length is refused), or
        None: the broadcast sends its length first, in a one-element size header."""


@runtime_checkable
class SharedIndices(Protocol):
    """Coordinates every rank adds to the aggregate without exchanging their indices (DEFT's
    common units, sent whole by everyone in the released code, `common_units=released`). They
    are known to every rank without exchange (from the plan every rank received), so they are
    in no rank's selection S_r: they send no indices, count in no |S_r|, but their values are
    allreduced with the union, U = (union of the S_r) + C, and every rank zeroes them in its
    residual. Only the union_allreduce exchange takes them."""

    def shared_indices(self, step: int) -> torch.Tensor | None:
        """Called after `select` at `step`: unique global int64 indices, identical on every rank
        (so the world may ask one rank only) and in no rank's selection (the exchange appends
        them to the selections' union without deduplicating), or None: none at this step."""


@runtime_checkable
class LowRank(Protocol):
    """The low_rank exchange's messages (ExchangeKind.LOW_RANK: PowerSGD). The exchange owns the
    collectives and calls these in order on every hosted rank; each returns a fresh tensor (or
    writes `out`) and calls no collective."""

    def low_rank_active(self, step: int) -> bool:
        """False: `step` is a plain mean all-reduce of acc (PowerSGD before `start_iter`)."""

    def low_rank_uncompressed(self, acc: torch.Tensor) -> torch.Tensor:
        """The values of the tensors sent whole, concatenated (their sum is all-reduced, / W)."""

    def low_rank_p(self, acc: torch.Tensor) -> torch.Tensor:
        """This rank's P_r = M_r Q for every compressed tensor, flat (their sum is all-reduced)."""

    def low_rank_q(self, acc: torch.Tensor, p_sum: torch.Tensor) -> torch.Tensor:
        """Keeps P, the all-reduced sum of the P_r orthogonalized, and returns this rank's
        Q_r = M_r^T P, flat (their sum is all-reduced, / W)."""

    def low_rank_decompress(self, uncompressed: torch.Tensor, q: torch.Tensor, out: torch.Tensor | None) -> None:
        """Keeps `q` (the mean Q, the next step's warm start); when `out` is given, writes the
        aggregate there: `uncompressed` (the mean) at the tensors sent whole, P Q^T elsewhere.
        Identical on every rank, so the exchange passes `out` to one hosted rank only."""


@runtime_checkable
class RegionOwner(Protocol):
    """The sparse_reduce_scatter exchange's regions (ExchangeKind.SPARSE_REDUCE_SCATTER: Ok-Topk).
    The exchange owns the collectives and asks the method, identically on every hosted rank,
    where the regions lie and what the owners keep; none of these calls a collective."""

    def regions_due(self, step: int) -> bool:
        """True: before `step`'s reduce-scatter the ranks agree on new region boundaries
        (every rank proposes `region_cuts`, the exchange sums them and calls `set_regions`)."""

    def region_cuts(self, selection: torch.Tensor) -> torch.Tensor:
        """This rank's proposal of the W - 1 inner boundaries (int64), from its selection."""

    def set_regions(self, cut_sums: torch.Tensor) -> None:
        """The sum over ranks of the proposals (int64 [W - 1]): the method sets its boundaries."""

    @property
    def region_boundaries(self) -> torch.Tensor:
        """int64 [W + 1]: B_0 = 0 <= B_1 <= ... <= B_W = N; rank j owns [B_j, B_j+1)."""

    def owner_threshold(self, step: int) -> float | None:
        """What an owner keeps of its summed region at `step`: |sum| > this, or None: every
        non-zero sum, the aggregate then being the top k of everything gathered."""

    def owners_kept(self, step: int, gathered: int, kth_magnitude: float | None) -> None:
        """After the all-gather: how many pairs the owners sent in all, and (when `owner_threshold`
        was None) the magnitude of the k-th largest, None if nothing was gathered."""

    @property
    def balanced(self) -> bool:
        """True: the owners keep exactly the k largest sums of all regions and rebalance them before
        the all-gather (Ok-Topk's paper variant); `owner_threshold` is then not consulted."""

    def residual_matches(self, selection: torch.Tensor, kept: torch.Tensor, step: int) -> torch.Tensor | None:
        """The positions of `selection` (ascending) whose residual this rank zeroes, given the
        aggregate's coordinates `kept` in the order the exchange kept them; None: the exact
        intersection (the exchange computes it)."""


@runtime_checkable
class FixedMessages(Protocol):
    """An exchange whose message sizes depend on the model alone (dense, PowerSGD), so that a
    cluster model can price it at any W without running it (docs/algorithms.md)."""

    def wire_allreduces(self, step: int) -> tuple[WireAllReduce, ...]:
        """The all-reduces of `step`'s exchange, in the order issued."""


@runtime_checkable
class WireRounding(Protocol):
    """The dense exchange rounds each rank's contribution to a 16-bit wire type (torch's bf16/fp16
    compress hooks) when `wire_dtype` is one; the dense exchange of a method without it is fp32."""

    @property
    def wire_dtype(self) -> torch.dtype | None:
        """The dtype each rank's contribution is rounded to for the wire, or None: the accumulator's."""


CAPABILITIES = (AveragedInputs, LeaderPlan, SharedIndices, LowRank, RegionOwner, FixedMessages, WireRounding)


def members(protocol: type) -> tuple[str, ...]:
    """The names a class must define to implement `protocol`."""
    return tuple(name for name in vars(protocol) if not name.startswith("_"))


@cache
def implements(cls: type, protocol: type) -> bool:
    """True when class `cls` defines (or inherits) every member of `protocol`, False when none;
    a class defining some but not all is refused."""
    defined = [name for name in members(protocol) if hasattr(cls, name)]
    if defined and len(defined) < len(members(protocol)):
        missing = [name for name in members(protocol) if name not in defined]
        raise TypeError(f"{cls.__name__} defines {', '.join(defined)} of {protocol.__name__} but not "
                        f"{', '.join(missing)} (sparsifiers/common/capabilities.py): implement all of them or none")
    return bool(defined)


def capable(method: object, protocol: type) -> bool:
    """True when `method`'s class implements `protocol` (every member defined on it or a parent).
    Checked on the class, once per class (a cached lookup): isinstance against a runtime_checkable
    Protocol looks every member up on the instance at every call, and the step asks several times
    a step on the hot path. Instance attributes (a test's wrapper) do not change the answer."""
    return implements(type(method), protocol)


def leader_of(method: object, step: int) -> int | None:
    """The rank whose plan every rank needs at `step`, or None (no plan, or no `LeaderPlan`)."""
    return method.plan_leader(step) if capable(method, LeaderPlan) else None


def shared_of(method: object, step: int) -> torch.Tensor | None:
    """The coordinates every rank adds unexchanged at `step`, or None (none, or no `SharedIndices`)."""
    return method.shared_indices(step) if capable(method, SharedIndices) else None


def require(methods: list | None, protocol: type, needed_by: str) -> list:
    """`methods` (the hosted ranks' sparsifiers) when they implement `protocol`; a clear error otherwise."""
    if not methods:
        raise ValueError(f"{needed_by} needs the hosted ranks' sparsifiers")
    if not capable(methods[0], protocol):
        raise TypeError(f"{needed_by} needs a method implementing {protocol.__name__} ({', '.join(members(protocol))}; "
                        f"sparsifiers/common/capabilities.py): {type(methods[0]).__name__} does not")
    return methods
