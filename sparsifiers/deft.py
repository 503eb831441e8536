"""DEFT: Distributed Execution of Fragmented Top-k (ICPP 2023; docs/algorithms.md, "DEFT").

    1. Units (once): tensors in order; one with more than N / W elements is cut into W pieces.
    2. k per unit (every step): from the unit norms, k_l ~ k * norm_l / sum(norm), at least 1.
    3. Allocation (every step, leader t mod W): greedy largest-cost-first into W bins; units with
       k_l = size are "common" (sent whole, no load). The leader broadcasts the plan.
    4. Selection: rank r takes bin (t + r) mod W: exact top-k_l of |acc| in each of its units
       (ties broken by lower index, sparsifiers/common/kernels/topk.py).
    5. Exchange: union_allreduce over the selections plus the common units; selections are
       disjoint, so build-up is 1.

`common_units`, where the units with k_l = size go (docs/algorithms.md, DEFT steps 3 and 5):
    released  as the released code: in no rank's selection. Every rank knows them from the plan
              and adds them to the union itself (`shared_indices`): no index traffic, no rank's
              count or load, but their values are allreduced with the rest of U and every rank
              zeroes them. |U| = sum_r |S_r| + their elements.
    leader    in the leader's selection (it decided they are common): the leader sends their
              indices, and they count in its |S_r| (and in the load imbalance). |U| = sum_r |S_r|.

`norms`: `local` (the released code: each rank's k_l from its own acc; the leader's k_l decides
the bins and the common units) or `global` (norms averaged over ranks first, so every rank uses
the same k_l). Averaging is one small allreduce before the plan, through the protocol's
`averaged_inputs`/`receive_average` hooks; a world that never calls them fails at the first step.

Sizes that need no header: the plan is always W + 1 + (number of units) long (every unit is in
one bin or common), so its broadcast goes without one (`plan_length`). With `norms=global` every
rank holds the same k_l and the plan, so every rank's count is known before the exchange (its
bin's k_l, plus the common units' sizes for the leader under `common_units=leader`) and the
exchange sends no size header (`known_counts`). With `norms=local` (the default) a rank's k_l
come from its own acc, which no collective before the exchange carries: the header stays.
"""
from __future__ import annotations

from typing import Any

import torch

from experiments.runformat import metric_keys as keys
from experiments.runformat.errors import ConfigError
from sparsifiers.common.base import SelectionScope, Sparsifier
from sparsifiers.common.exchange_kinds import ExchangeKind
from sparsifiers.common.deft_allocation import (
    allocate,
    bin_loads,
    common_units,
    decode_plan,
    encode_plan,
    make_units,
    unit_cost,
    unit_k,
)
from sparsifiers.common.kernels import ExactTopK
from sparsifiers.common.kernels.backend import batched_path
from sparsifiers.common.kernels.classed_topk import unit_topk
from sparsifiers.common.kernels.segmented import ranges, tiles, unit_norms
from sparsifiers.common.layout import Layout

NORM_MODES = ("local", "global")
COMMON_UNIT_MODES = ("released", "leader")


class DEFT(Sparsifier):
    """Fragmented top-k: the units of the model are packed into W bins, one bin per rank."""

    name = "deft"
    scope = SelectionScope.SPLIT
    exchanges = (ExchangeKind.UNION_ALLREDUCE,)

    def __init__(
        self,
        layout: Layout,
        world_size: int,
        rank: int,
        density: float,
        norms: str = "local",
        common_units: str = "released",
        log_units_every: int = 100,
        **knobs,
    ) -> None:
        super().__init__(layout, world_size, rank, density=density, **knobs)
        if norms not in NORM_MODES:
            raise ConfigError(f"sparsifier.norms must be local or global, got {norms}")
        if common_units not in COMMON_UNIT_MODES:
            raise ConfigError(
                f"sparsifier.common_units must be released or leader, got {common_units}: released adds units "
                f"with k_l = size on every rank unexchanged (the authors' code), leader sends them from the leader"
            )
        if not isinstance(log_units_every, int) or log_units_every < 0:
            raise ConfigError(
                f"sparsifier.log_units_every must be an integer >= 0 (0: never), got {log_units_every}"
            )
        self.norms = norms
        self.common_units = common_units
        self.log_units_every = log_units_every
        # 1. units, once.
        self.units = make_units(layout, world_size)
        self.sizes = [end - start for start, end in self.units]
        self._tiles = tiles(self.units, layout.numel)  # always, as make_units skips only empty pieces
        # This step's view, kept for metrics() and exact resume.
        self._step = -1
        self._k: list[int] = []
        self._norms: list[float] = []
        self._bins: list[list[int]] = []
        self._common: list[int] = []
        self._scanned = 0
        self._mean_norms: list[float] | None = None  # norms=global: the world's average
        self._mean_step = -1
        self._k_key: tuple[int, int, int] | None = None  # which acc self._k was computed from
        # Preallocated: the hot path allocates no full-size tensor per step. |acc| lives in the
        # process's shared scratch (workspace.py); the selection buffers are this rank's own.
        self._indices = torch.empty(0, dtype=torch.int64)  # this rank's selection, grown as needed
        self._top_k = ExactTopK()
        self._shared: tuple[tuple[int, ...], torch.Tensor] | None = None  # common units -> their indices

    # -- norms=global: the world averages unit norms before the plan ----------------------------
    def averaged_inputs(self, acc: torch.Tensor, step: int) -> torch.Tensor | None:
        """This rank's unit norms, for the world to average over ranks before the plan."""
        return self._local_norms(acc) if self.norms == "global" else None

    def receive_average(self, mean: torch.Tensor, step: int) -> None:
        """The average over ranks of `averaged_inputs`, identical on every rank."""
        self._mean_norms = mean.tolist()
        self._mean_step = step

    # -- 2. k per unit ------------------------------------------------------------------------
    def _local_norms(self, acc: torch.Tensor) -> torch.Tensor:
        # One fused op on CUDA; on the CPU the same per-unit vector_norm as the loop, bit for bit.
        if self._tiles:
            return unit_norms(acc, self.sizes)
        return torch.stack([torch.linalg.vector_norm(acc[start:end]) for start, end in self.units])

    def _unit_k(self, acc: torch.Tensor, step: int) -> list[int]:
        # The leader computes k_l in make_plan and again in select on the same acc: reuse it.
        # acc._version changes with every in-place write, so a modified acc is never reused.
        key = (step, acc.data_ptr(), acc._version)
        if key == self._k_key:
            return self._k
        if self.norms == "global":
            if self._mean_step != step:
                raise RuntimeError(
                    "sparsifier.norms=global: the world did not average the unit norms before the plan "
                    "(averaged_inputs/receive_average were not called)"
                )
            norms = self._mean_norms
        else:
            norms = self._local_norms(acc).tolist()  # one host sync: step 2 is sequential
        self._norms = norms
        self._k = unit_k(norms, self.sizes, self.k)
        self._k_key = key
        return self._k

    # -- 3. allocation, on the leader ---------------------------------------------------------
    def plan_leader(self, step: int) -> int:
        return step % self.world_size

    def plan_length(self, step: int) -> int:
        """W bin sizes, the common count, then every unit once (encode_plan)."""
        return self.world_size + 1 + len(self.units)

    def make_plan(self, acc: torch.Tensor, step: int) -> torch.Tensor:
        ks = self._unit_k(acc, step)
        common = common_units(ks, self.sizes)
        costs = [unit_cost(size, k) for size, k in zip(self.sizes, ks)]
        return encode_plan(allocate(costs, common, self.world_size), common)

    # -- 4. selection -------------------------------------------------------------------------
    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> torch.Tensor:
        if plan is None:
            raise ValueError("deft selects from the leader's plan: the world must serve make_plan")
        ks = self._unit_k(acc, step)
        self._bins, self._common = decode_plan(plan.tolist(), self.world_size)
        self._step = step
        mine = self._bins[(step + self.rank) % self.world_size]
        # common_units=leader: they travel in the leader's selection only, so selections stay
        # disjoint. released: in no selection; every rank adds them (shared_indices).
        leads = self.common_units == "leader" and self.rank == self.plan_leader(step)
        whole = self._common if leads else []
        count = sum(ks[unit] for unit in mine) + sum(self.sizes[unit] for unit in whole)
        self._ensure_buffers(acc, count)
        selected = sum(ks[unit] for unit in mine)
        selection = self._indices[:count]
        if batched_path(acc):
            # GPUs: every unit of the bin in a bounded number of ops, no host sync (kernels/classed_topk.py).
            # No view more than needed: each is an operation, and the GPU path is launch-bound.
            unit_topk(acc, [self.units[unit][0] for unit in mine], [self.sizes[unit] for unit in mine],
                      [ks[unit] for unit in mine], out=selection[:selected] if whole else selection)
            if whole:  # the leader's common units, whole
                ranges([self.units[unit][0] for unit in whole], [self.sizes[unit] for unit in whole], acc.device,
                       out=selection[selected:])
        else:
            # The reference, and the CPU's path (the compiled top-k unit by unit).
            position = 0
            for unit in mine:
                start, end = self.units[unit]
                k_unit = ks[unit]
                self._top_k(acc[start:end], k_unit, offset=start, out=self._indices[position : position + k_unit])
                position += k_unit
            for unit in whole:
                start, end = self.units[unit]
                torch.arange(start, end, out=self._indices[position : position + end - start])
                position += end - start
        self._scanned = sum(self.sizes[unit] for unit in mine)
        return selection

    # -- 5. exchange: the common units, added by every rank ------------------------------------
    def shared_indices(self, step: int) -> torch.Tensor | None:
        """common_units=released: the indices of this step's common units (from the plan, the
        same on every rank), which every rank adds to the union unexchanged; else None."""
        if step != self._step:
            raise ValueError(f"deft.shared_indices({step}) asked after select of step {self._step}")
        if self.common_units != "released" or not self._common:
            return None
        key = tuple(self._common)
        if self._shared is None or self._shared[0] != key or self._shared[1].device != self._indices.device:
            # The set of common units rarely changes between steps: built again only when it does.
            starts = [self.units[unit][0] for unit in self._common]
            lengths = [self.sizes[unit] for unit in self._common]
            self._shared = (key, ranges(starts, lengths, self._indices.device))
        return self._shared[1]

    def known_counts(self, step: int) -> list[int] | None:
        """norms=global: every rank's count from the shared k_l and plan (as `select` counts its
        own); norms=local: None, each rank's k_l are its own."""
        if step != self._step:
            raise ValueError(f"deft.known_counts({step}) asked after select of step {self._step}")
        if self.norms != "global":
            return None
        leader = self.plan_leader(step)
        whole = sum(self.sizes[unit] for unit in self._common) if self.common_units == "leader" else 0
        return [sum(self._k[unit] for unit in self._bins[(step + rank) % self.world_size])
                + (whole if rank == leader else 0) for rank in range(self.world_size)]

    def _ensure_buffers(self, acc: torch.Tensor, count: int) -> None:
        if self._indices.device != acc.device:
            self._indices = torch.empty(0, dtype=torch.int64, device=acc.device)
        if self._indices.numel() < count:
            # Grows rarely (count is about k + the common units); never shrinks.
            capacity = max(count, 2 * self._indices.numel())
            self._indices = torch.empty(capacity, dtype=torch.int64, device=acc.device)

    # -- method state -------------------------------------------------------------------------
    def metrics(self) -> dict[str, float | list[float]]:
        """This rank's view of the last step. Bin loads are this rank's costs of the plan's bins:
        the leader's exactly with norms=global; with norms=local each rank's k_l differs a little.
        The ratio compares the largest load with max(largest unit cost, total cost / W)."""
        if self._step < 0:
            return {}
        costs = [unit_cost(size, k) for size, k in zip(self.sizes, self._k)]
        loads = bin_loads(self._bins, costs)
        binned = [costs[unit] for units in self._bins for unit in units]
        lower_bound = max(max(binned), sum(binned) / self.world_size) if binned else 0.0
        metrics: dict[str, float | list[float]] = {
            keys.DEFT_MAX_BIN_LOAD_RATIO: max(loads) / lower_bound if lower_bound else 1.0,
            keys.DEFT_K_SUM: float(sum(self._k)),
            keys.DEFT_COMMON_UNITS: float(len(self._common)),
            keys.SCANNED: float(self._scanned),
        }
        if self.log_units_every and self._step % self.log_units_every == 0:
            common = set(self._common)
            metrics[keys.DEFT_UNIT_K] = [float(k) for k in self._k]
            metrics[keys.DEFT_UNIT_COMMON] = [1.0 if unit in common else 0.0 for unit in range(len(self.units))]
            metrics[keys.DEFT_UNIT_NORMS] = list(self._norms)
            metrics[keys.DEFT_BIN_LOADS] = loads
        return metrics

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "norms": self.norms,
            "units": len(self.units),
            "common_units": self.common_units,
            "log_units_every": self.log_units_every,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "units": [list(unit) for unit in self.units],
            "step": self._step,
            "k": list(self._k),
            "norms": list(self._norms),
            "bins": [list(units) for units in self._bins],
            "common": list(self._common),
            "scanned": self._scanned,
            "mean_norms": None if self._mean_norms is None else list(self._mean_norms),
            "mean_step": self._mean_step,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        units = [tuple(unit) for unit in state["units"]]
        if units != self.units:
            raise ValueError("deft state was saved for other units (a different model or world size)")
        self._step = int(state["step"])
        self._k = list(state["k"])
        self._norms = list(state["norms"])
        self._bins = [list(units) for units in state["bins"]]
        self._common = list(state["common"])
        self._scanned = int(state["scanned"])
        self._mean_norms = None if state["mean_norms"] is None else list(state["mean_norms"])
        self._mean_step = int(state["mean_step"])
        self._k_key = None
