"""The sparsifier protocol.

A sparsifier is one object per rank, holding that rank's state. It never calls a collective:
it declares the exchange it needs, returns a selection (global indices into the flat gradient
buffer), and is told afterwards what happened globally so that adaptive rules update identically
on every rank. What it needs from other ranks before selecting (a leader's plan) it requests
declaratively through `plan_leader`/`make_plan`, and the world serves it.

One step, as the world drives it (see experiments/core/step.py):

    acc  = precondition(grad) + residual          # error feedback (shared plumbing)
    plan = make_plan(acc, t) on rank plan_leader(t), broadcast   # only if a leader is declared
    S    = select(acc, t, plan)                   # timed
    C    = shared_indices(t)                      # after select: coordinates every rank adds, or None
    n    = known_counts(t)                        # after select: every |S_r| if all ranks know it, or None
    agg  = exchange(kind, {S_r}, {acc_r}, C, n)   # the world; traffic counted there
    observe(Feedback(t, counts, aggregated))      # identical on all ranks
    on_residual_zeroed(indices)                   # which coordinates this rank transmitted

Shared indices C (DEFT's "common" units, sent whole by everyone in the released code) are known
to every rank without exchange (from the plan every rank received), so they are in no rank's
selection S_r: they send no indices, count in no |S_r|, but their values are allreduced with the
union, U = (union of the S_r) + C, and every rank zeroes them in its residual.

Sizes every rank knows do not travel: a method whose counts |S_r| (`known_counts`) or plan length
(`plan_length`) follow from what every rank holds before the exchange (a fixed k, a shared plan)
declares them, and the exchange and the plan's broadcast send no size header for them.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

import torch

from experiments.errors import ConfigError  # neutral (imports nothing): no role reaches in here
from sparsifiers.layout import Layout


class ExchangeKind(str, Enum):
    """How the ranks' selections become one aggregate (docs/algorithms.md, "Exchange kinds")."""

    DENSE = "dense"  # allreduce of the whole vector
    UNION_ALLREDUCE = "union_allreduce"  # allgather indices, allreduce values on the union
    SPARSE_ALLGATHER = "sparse_allgather"  # allgather (index, value) pairs
    LEADER_BROADCAST = "leader_broadcast"  # the leader's indices, allreduce values there
    SHARED_ALLREDUCE = "shared_allreduce"  # identical indices on every rank by construction
    # (a shared seed, Random-k): no index traffic, allreduce the values
    TREE_MERGE = "tree_merge"  # gTop-k: (index, value) lists merged up a binomial tree to rank 0,
    # k kept at every merge, the result broadcast; W a power of 2
    SPARSE_REDUCE_SCATTER = "sparse_reduce_scatter"  # Ok-Topk: each rank's pairs in W regions go to
    # the regions' owners (uneven point-to-point rounds), each owner sums its region and keeps
    # what passes a global threshold, and the owners' pairs are all-gathered
    LOW_RANK = "low_rank"  # PowerSGD: no selection; allreduce the small tensors whole, then the
    # low-rank factors P and Q of the others, through the method's low_rank_* hooks


class SelectionScope(str, Enum):
    """What build-up is measured against (docs/metrics.md, "Density and selection")."""

    WHOLE = "whole"  # every rank selects over the whole vector for the whole aggregate
    SPLIT = "split"  # the vector or the work is split among ranks: build-up is 1 by construction


@dataclass(frozen=True)
class Feedback:
    """What the exchange did, known identically on every rank."""

    step: int
    counts: torch.Tensor  # int64 [W]: |S_r| for every rank r (0 for ranks that did not select)
    aggregated: int  # |U|: coordinates in the aggregate


@dataclass(frozen=True)
class WireAllReduce:
    """One all-reduce of a method whose messages have a size fixed by the model alone (dense,
    PowerSGD), so that a cluster model can price its exchange at any W without running it: each
    rank contributes `elements` values of `element_bytes` each (per-rank bytes of a ring
    all-reduce: 2 (W - 1) / W * elements * element_bytes)."""

    what: str  # "values" (dense), "uncompressed", "p", "q" (PowerSGD)
    elements: int
    element_bytes: int


def target_count(density: float, numel: int) -> int:
    """k_target = floor(density * N), the papers' definition."""
    return math.floor(density * numel)


class Sparsifier(ABC):
    """Base class: common knobs, validation and the default (no-op) hooks."""

    name: ClassVar[str]
    scope: ClassVar[SelectionScope] = SelectionScope.WHOLE
    exchanges: ClassVar[tuple[ExchangeKind, ...]] = (ExchangeKind.UNION_ALLREDUCE,)
    # True for methods that apply momentum themselves (DGC's momentum correction): the runner
    # then sets the optimizer's momentum to 0 so that it is not applied twice.
    owns_momentum: ClassVar[bool] = False
    # Metric keys of state that is identical on every rank by design (MiCRO's threshold, ExDyna's
    # partitions): tests check it bit for bit across ranks. Other metrics are rank 0's own view.
    shared_state: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        layout: Layout,
        world_size: int,
        rank: int,
        density: float,
        error_feedback: bool = True,
        exchange: str | None = None,
        seed: int = 0,
    ) -> None:
        if not 0.0 < density <= 1.0:
            raise ConfigError(f"sparsifier.density must be in (0, 1], got {density}: set e.g. sparsifier.density=0.01")
        self.layout = layout
        self.numel = layout.numel
        self.world_size = world_size
        self.rank = rank
        self.density = float(density)
        self.error_feedback = bool(error_feedback)
        self.seed = int(seed)  # the run's seed; derive per-rank or shared RNG streams from it
        self.k = target_count(self.density, self.numel)
        if self.k < 1:
            raise ConfigError(
                f"sparsifier.density={density} selects no element of a {self.numel}-element model "
                f"(k = floor(density * N) = 0); raise sparsifier.density to at least {1 / self.numel:.2g}"
            )
        self.exchange = self._exchange_kind(exchange)

    def _exchange_kind(self, exchange: str | None) -> ExchangeKind:
        if exchange is None:
            return self.exchanges[0]
        allowed = [kind.value for kind in self.exchanges]
        if exchange not in allowed:
            raise ConfigError(
                f"sparsifier.exchange={exchange} is not supported by {self.name}; choose one of: "
                + ", ".join(allowed)
            )
        return ExchangeKind(exchange)

    # -- schedule -------------------------------------------------------------------------------
    def start_epoch(self, epoch: int, steps_per_epoch: int) -> None:
        """Called at the start of every epoch (DGC's warm-up follows epochs)."""

    def set_learning_rate(self, lr: float) -> None:
        """The optimizer's learning rate of the coming step, before the step: the runner
        (experiments/rank/train.py) calls it every step after the schedule set it; with the DDP
        hook, the script calls the hook's `set_learning_rate`. Drivers without an optimizer (the
        selection replay, tests/stepped_ranks.py) never call it. Accordion's detection compares
        it with the previous detection's; the default ignores it."""

    # -- before selection ------------------------------------------------------------------
    def precondition(self, grad: torch.Tensor) -> torch.Tensor:
        """Transforms the local gradient before error feedback (DGC's momentum correction).
        Returns a tensor the caller only reads; the default is the gradient itself."""
        return grad

    def averaged_inputs(self, acc: torch.Tensor, step: int) -> torch.Tensor | None:
        """A small 1-D float tensor this rank contributes before the plan; the world averages it
        over ranks (one metered allreduce) and hands the mean to `receive_average` on every rank.
        None (the default): nothing to average. DEFT's `norms=global` averages unit norms here,
        MiCRO's and ExDyna's `threshold_start=calibrated` the first step's k-th largest |acc|."""
        return None

    def receive_average(self, mean: torch.Tensor, step: int) -> None:
        """The mean over ranks of `averaged_inputs`, identical on every rank, before the plan."""

    def plan_leader(self, step: int) -> int | None:
        """The rank whose plan every rank needs before selecting at `step`, or None."""
        return None

    def make_plan(self, acc: torch.Tensor, step: int) -> torch.Tensor:
        """Called on the leader only: a 1-D int64 tensor the world broadcasts to all ranks."""
        raise NotImplementedError(f"{self.name} declares no leader plan")

    def plan_length(self, step: int) -> int | None:
        """The number of elements of `make_plan`'s plan at `step` when every rank knows it before
        the broadcast (then the plan travels alone), or None (the default): the broadcast sends
        its length first, in a one-element size header."""
        return None

    # -- selection ---------------------------------------------------------------------------
    @abstractmethod
    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> torch.Tensor | None:
        """Returns this rank's selection: unique global int64 indices into the flat buffer, or
        None for "every coordinate" (the dense exchange, and Ok-Topk's dense warm-up steps). Must not call collectives.
        The returned tensor may be a reused buffer: valid until the next call."""

    def shared_indices(self, step: int) -> torch.Tensor | None:
        """Coordinates every rank adds to the aggregate without exchanging their indices, called
        after `select` at `step`: unique global int64 indices, identical on every rank (so the
        world may ask one rank only) and in no rank's selection (the exchange appends them to
        the selections' union without deduplicating), or None (the default): none.
        Only the union_allreduce exchange takes them. DEFT's common units (`common_units=released`)."""
        return None

    def known_counts(self, step: int) -> list[int] | None:
        """Every rank's |S_r| at `step`, called after `select`: W counts, identical on every rank
        and known to all of them before the exchange (a fixed k, or the counts a shared plan
        fixes), so that the exchange sends no size header; the exchange checks the hosted ranks'
        selections against them. None (the default): the counts depend on each rank's data and
        travel in the header. Only the union_allreduce and sparse_allgather exchanges take them
        (the others send no header)."""
        return None

    # -- fixed-size messages (dense, PowerSGD) ------------------------------------------------
    @property
    def wire_dtype(self) -> torch.dtype | None:
        """The dense exchange only: the dtype each rank's contribution is rounded to for the
        wire (torch's bf16/fp16 compress hooks), or None (the default): the accumulator's."""
        return None

    def wire_allreduces(self, step: int) -> tuple[WireAllReduce, ...] | None:
        """The all-reduces of `step`'s exchange when their sizes depend on the model alone (dense,
        PowerSGD), in the order issued; None (the default): they depend on the selections."""
        return None

    # -- the low-rank exchange (ExchangeKind.LOW_RANK: PowerSGD) -----------------------------
    # The exchange owns the collectives and calls these in order on every hosted rank; each
    # returns a fresh tensor (or writes `out`) and calls no collective.
    def low_rank_active(self, step: int) -> bool:
        """False: `step` is a plain mean all-reduce of acc (PowerSGD before `start_iter`)."""
        raise NotImplementedError(f"{self.name} has no low-rank exchange")

    def low_rank_uncompressed(self, acc: torch.Tensor) -> torch.Tensor:
        """The values of the tensors sent whole, concatenated (their sum is all-reduced, / W)."""
        raise NotImplementedError(f"{self.name} has no low-rank exchange")

    def low_rank_p(self, acc: torch.Tensor) -> torch.Tensor:
        """This rank's P_r = M_r Q for every compressed tensor, flat (their sum is all-reduced)."""
        raise NotImplementedError(f"{self.name} has no low-rank exchange")

    def low_rank_q(self, acc: torch.Tensor, p_sum: torch.Tensor) -> torch.Tensor:
        """Keeps P, the all-reduced sum of the P_r orthogonalized, and returns this rank's
        Q_r = M_r^T P, flat (their sum is all-reduced, / W)."""
        raise NotImplementedError(f"{self.name} has no low-rank exchange")

    def low_rank_decompress(self, uncompressed: torch.Tensor, q: torch.Tensor, out: torch.Tensor | None) -> None:
        """Keeps `q` (the mean Q, the next step's warm start); when `out` is given, writes the
        aggregate there: `uncompressed` (the mean) at the tensors sent whole, P Q^T elsewhere.
        Identical on every rank, so the exchange passes `out` to one hosted rank only."""
        raise NotImplementedError(f"{self.name} has no low-rank exchange")

    # -- the region exchange (ExchangeKind.SPARSE_REDUCE_SCATTER: Ok-Topk) --------------------
    # The exchange owns the collectives and asks the method, identically on every hosted rank,
    # where the regions lie and what the owners keep; none of these calls a collective.
    def regions_due(self, step: int) -> bool:
        """True: before `step`'s reduce-scatter the ranks agree on new region boundaries
        (every rank proposes `region_cuts`, the exchange sums them and calls `set_regions`)."""
        raise NotImplementedError(f"{self.name} has no region exchange")

    def region_cuts(self, selection: torch.Tensor) -> torch.Tensor:
        """This rank's proposal of the W - 1 inner boundaries (int64), from its selection."""
        raise NotImplementedError(f"{self.name} has no region exchange")

    def set_regions(self, cut_sums: torch.Tensor) -> None:
        """The sum over ranks of the proposals (int64 [W - 1]): the method sets its boundaries."""
        raise NotImplementedError(f"{self.name} has no region exchange")

    @property
    def region_boundaries(self) -> torch.Tensor:
        """int64 [W + 1]: B_0 = 0 <= B_1 <= ... <= B_W = N; rank j owns [B_j, B_j+1)."""
        raise NotImplementedError(f"{self.name} has no region exchange")

    def owner_threshold(self, step: int) -> float | None:
        """What an owner keeps of its summed region at `step`: |sum| > this, or None: every
        non-zero sum, the aggregate then being the top k of everything gathered."""
        raise NotImplementedError(f"{self.name} has no region exchange")

    def owners_kept(self, step: int, gathered: int, kth_magnitude: float | None) -> None:
        """After the all-gather: how many pairs the owners sent in all, and (when `owner_threshold`
        was None) the magnitude of the k-th largest, None if nothing was gathered."""
        raise NotImplementedError(f"{self.name} has no region exchange")

    @property
    def balanced(self) -> bool:
        """True: the owners keep exactly the k largest sums of all regions and rebalance them before
        the all-gather (Ok-Topk's paper variant); `owner_threshold` is then not consulted."""
        return False

    def residual_matches(self, selection: torch.Tensor, kept: torch.Tensor, step: int) -> torch.Tensor | None:
        """The positions of `selection` (ascending) whose residual this rank zeroes, given the
        aggregate's coordinates `kept` in the order the exchange kept them; None: the exact
        intersection (the exchange computes it)."""
        raise NotImplementedError(f"{self.name} has no region exchange")

    # -- after the exchange ------------------------------------------------------------------
    def observe(self, feedback: Feedback) -> None:
        """Global feedback after the exchange; adaptive rules update here, identically everywhere."""

    def on_residual_zeroed(self, indices: torch.Tensor | None) -> None:
        """The coordinates this rank transmitted (None: all). DGC masks its momentum here."""

    def metrics(self) -> dict[str, float | list[float]]:
        """Method state worth plotting (e.g. sparsifier/threshold), logged with each logged step
        from rank 0's sparsifier. Lists (per-unit k, partition boundaries) go to metrics.jsonl;
        W&B receives the scalars."""
        return {}

    @property
    def current_density(self) -> float:
        """The density this step aims at (DGC's warm-up stages change it; others: `density`)."""
        return self.density

    @property
    def current_k(self) -> int:
        """k of the current density: what density/error is measured against."""
        return self.k

    def describe(self) -> dict[str, Any]:
        """What this run used (resolved defaults, variants), recorded in summary.json."""
        return {"name": self.name, "k": self.k, "exchange": self.exchange.value, "scope": self.scope.value}

    # -- exact resume ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(f"{self.name} has no state, got keys {sorted(state)}")
