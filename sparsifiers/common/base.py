"""The core every method implements.

A sparsifier is one object per rank, holding that rank's state. It never calls a collective:
it declares the exchange it needs (`exchanges`, sparsifiers/common/exchange_kinds.py), returns a
selection (global indices into the flat gradient buffer), and is told afterwards what happened
globally so that adaptive rules update identically on every rank. One step, as the world drives
it (experiments/engine/core/sparsify.py); [bracketed] lines are capabilities, which only the methods that
need them implement (sparsifiers/common/capabilities.py):

    acc  = precondition(grad) + residual          # error feedback (shared plumbing)
    [mean of averaged_inputs(acc, t) -> receive_average]    # one small allreduce
    [plan = make_plan(acc, t) on rank plan_leader(t), broadcast]
    S    = select(acc, t, plan)                   # timed
    [C   = shared_indices(t)]                     # coordinates every rank adds unexchanged
    n    = known_counts(t)                        # every |S_r| if all ranks know it, or None
    agg  = exchange(kind, {S_r}, {acc_r}, C, n)   # the world; traffic counted there
    observe(Feedback(t, counts, aggregated))      # identical on all ranks
    on_residual_zeroed(indices)                   # which coordinates this rank transmitted

Sizes every rank knows do not travel: counts |S_r| every rank holds before the exchange (a
fixed k, a shared plan: `known_counts`) and a plan's length (`LeaderPlan.plan_length`).
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from enum import Enum
from typing import Any, ClassVar

import torch

from experiments.runformat.errors import ConfigError  # the bottom floor: imports nothing of sparsebench
from sparsifiers.common.exchange_kinds import ExchangeKind, Feedback
from sparsifiers.common.layout import Layout


class SelectionScope(str, Enum):
    """What build-up is measured against (docs/metrics.md, "Density and selection")."""

    WHOLE = "whole"  # every rank selects over the whole vector for the whole aggregate
    SPLIT = "split"  # the vector or the work is split among ranks: build-up is 1 by construction


def target_count(density: float, numel: int) -> int:
    """k_target = floor(density * N), the papers' definition."""
    return math.floor(density * numel)


class Sparsifier(ABC):
    """Base class: common knobs, validation, `select`, and the hooks every step calls."""

    name: ClassVar[str]
    scope: ClassVar[SelectionScope] = SelectionScope.WHOLE
    exchanges: ClassVar[tuple[ExchangeKind, ...]] = (ExchangeKind.UNION_ALLREDUCE,)
    # True for methods that apply momentum themselves (DGC's momentum correction): the runner
    # then sets the optimizer's momentum to 0 so that it is not applied twice.
    owns_momentum: ClassVar[bool] = False
    # Metric keys of state that is identical on every rank by design (MiCRO's threshold, ExDyna's
    # partitions): tests check it bit for bit across ranks. Other metrics are rank 0's own view.
    shared_state: ClassVar[tuple[str, ...]] = ()

    def __init__(self, layout: Layout, world_size: int, rank: int, density: float, error_feedback: bool = True,
                 exchange: str | None = None, seed: int = 0) -> None:
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
            raise ConfigError(f"sparsifier.exchange={exchange} is not supported by {self.name}; choose one of: "
                              + ", ".join(allowed))
        return ExchangeKind(exchange)

    # -- schedule -------------------------------------------------------------------------------
    def start_epoch(self, epoch: int, steps_per_epoch: int) -> None:
        """Called at the start of every epoch (DGC's warm-up follows epochs)."""

    def set_learning_rate(self, lr: float) -> None:
        """The coming step's learning rate, before the step: the runner calls it every step (a
        DDP script through the hook's `set_learning_rate`); drivers without an optimizer (the
        selection replay, tests/helpers/stepped_ranks.py) never do. Accordion's detection reads it."""

    # -- the step ---------------------------------------------------------------------------
    def precondition(self, grad: torch.Tensor) -> torch.Tensor:
        """Transforms the local gradient before error feedback (DGC's momentum correction).
        Returns a tensor the caller only reads; the default is the gradient itself."""
        return grad

    @abstractmethod
    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> torch.Tensor | None:
        """Returns this rank's selection: unique global int64 indices into the flat buffer, or
        None for "every coordinate" (the dense exchange, and Ok-Topk's dense warm-up steps). Must
        not call collectives. The returned tensor may be a reused buffer: valid until the next call."""

    def known_counts(self, step: int) -> list[int] | None:
        """Every rank's |S_r| at `step`, called after `select`: W counts, identical on every rank
        and known to all before the exchange (a fixed k, the counts a shared plan fixes): no size
        header is sent, the hosted ranks' selections are checked against them. None (the default):
        the counts travel in the header. Only union_allreduce and sparse_allgather take them."""
        return None

    def observe(self, feedback: Feedback) -> None:
        """Global feedback after the exchange; adaptive rules update here, identically everywhere."""

    def on_residual_zeroed(self, indices: torch.Tensor | None) -> None:
        """The coordinates this rank transmitted (None: all). DGC masks its momentum here."""

    # -- what the run logs and records ----------------------------------------------------------
    def metrics(self) -> dict[str, float | list[float]]:
        """Method state worth plotting (sparsifier/threshold), logged from rank 0's sparsifier:
        lists (per-unit k, partitions) to metrics.jsonl, scalars to W&B too."""
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
