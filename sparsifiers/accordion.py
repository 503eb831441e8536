"""Accordion top-k as released in the ExDyna repository (`AccordionTopKReducer`, the DEFT/MiCRO/ExDyna
lineage; docs/algorithms.md, "Accordion"): per-parameter top-k whose ratio switches between k_low
and k_high when the gradient's norm changes quickly (a "critical regime").

    1. Detection (batch 0 of epochs 0, switch_freq, 2 switch_freq, ...; rank 0 only): for every
       parameter l, curr_l = ||raw local gradient of this mini-batch on l||_2 (captured in
       `precondition`, before error feedback). k_high if this is the first detection, or the
       learning rate dropped since the previous detection, or |prev_l - curr_l| / prev_l >
       threshold; k_low otherwise (float32: prev 0 gives inf, k_high; 0 / 0 gives NaN, k_low).
       Then prev_l <- curr_l and prev_lr <- lr (initially 1e-8 and 0).
    2. Broadcast: rank 0's choices are the plan (one int64 per parameter, 1 = k_high); every
       rank keeps the last plan until the next detection (all k_high before the first).
    3. Size: K_l = max(1, int(ratio_l * n_l)), ratio_l read as a float32 (the released tensor).
    4. Selection: exact top-K_l of |acc| inside each parameter (ties broken by lower index).
    5. Memory: acc with the selected entries zeroed (the framework's error feedback).
    6. Exchange: sparse_allgather, agg = (1/W) sum_r scatter(S_r, acc_r[S_r]); every rank sends
       sum_l K_l pairs, the same count everywhere (the plan is shared), which every rank knows
       before the exchange: no size header travels (`known_counts`), nor a header before the
       plan, one choice per parameter (`plan_length`).

`density` is ignored (k_low and k_high decide; a sweep may set sparsifier.density for every
method): the target of a step is the plan's sum_l K_l (`current_k`, what density/error is
measured against), `current_density` = current_k / N; `k`/`density` are the all-k_high plan's.

The learning rate reaches the method through `set_learning_rate`, called by the runner before
every step; a driver that never calls it (the selection replay, a DDP script that does not call
the hook's `set_learning_rate`) leaves the learning-rate rule off.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from experiments.runformat import metric_keys as keys
from experiments.runformat.errors import ConfigError
from sparsifiers.common.base import SelectionScope, Sparsifier
from sparsifiers.common.exchange_kinds import ExchangeKind
from sparsifiers.common.kernels import ExactTopK
from sparsifiers.common.kernels.backend import batched_path
from sparsifiers.common.kernels.classed_topk import unit_topk
from sparsifiers.common.kernels.segmented import unit_norms
from sparsifiers.common.layout import Layout

INITIAL_NORM = 1e-8  # prev_l before the first detection (the released value)
INITIAL_LR = 0.0  # prev_lr before the first detection (the released value)


def parameter_k(ratio: float, numel: int) -> int:
    """K_l = max(1, int(ratio * n_l)), the ratio rounded to float32 first as the released code
    reads it from its float32 tensor (`.item()`)."""
    return max(1, int(float(np.float32(ratio)) * numel))


def decide(norms: torch.Tensor, previous: torch.Tensor, threshold: float, first: bool, lr_dropped: bool) -> torch.Tensor:
    """Step 1 per parameter, in float32 as released: True (k_high) if first, or the learning rate
    dropped, or |prev - curr| / prev > threshold (inf > threshold, NaN is not)."""
    if first or lr_dropped:
        return torch.ones(norms.numel(), dtype=torch.bool)
    change = (previous.float() - norms.float()).abs() / previous.float()
    return change > threshold


class Accordion(Sparsifier):
    """Per-parameter top-k at k_low or k_high, switched by rank 0 at detection steps."""

    name = "accordion"
    scope = SelectionScope.WHOLE
    exchanges = (ExchangeKind.SPARSE_ALLGATHER,)
    shared_state = (keys.ACCORDION_HIGH,)

    def __init__(
        self,
        layout: Layout,
        world_size: int,
        rank: int,
        density: float = 0.01,
        k_low: float = 0.001,  # the lineage's run.sh (--k_low=0.001); 0.1 is only the released function's default
        k_high: float = 0.01,  # the lineage's run.sh (--k_high=0.01); 0.99 is only the released function's default
        threshold: float = 0.5,
        switch_freq: int = 10,
        **knobs,
    ) -> None:
        for key, ratio in (("k_low", k_low), ("k_high", k_high)):
            if not 0.0 < ratio <= 1.0:
                raise ConfigError(f"sparsifier.{key} must be in (0, 1], got {ratio}: the fraction of each parameter sent")
        if not threshold >= 0.0:
            raise ConfigError(f"sparsifier.threshold must be >= 0, got {threshold}: the relative norm change (0.5 released)")
        if isinstance(switch_freq, bool) or not isinstance(switch_freq, int) or switch_freq < 1:
            raise ConfigError(f"sparsifier.switch_freq must be an integer >= 1 (epochs between detections), got {switch_freq}")
        # `density` is ignored (docstring); the base's k is replaced by the all-k_high plan's below.
        super().__init__(layout, world_size, rank, density=1.0, **knobs)
        self.requested_density = float(density)
        self.k_low, self.k_high = float(k_low), float(k_high)
        self.threshold = float(threshold)
        self.switch_freq = switch_freq
        self.segments = [(segment.offset, segment.end) for segment in layout.segments]
        self.k_of = {False: [parameter_k(self.k_low, end - start) for start, end in self.segments],
                     True: [parameter_k(self.k_high, end - start) for start, end in self.segments]}
        self.k = sum(self.k_of[True])
        self.density = self.k / self.numel
        # The schedule (start_epoch) and the learning rate (set_learning_rate).
        self._epoch, self._steps_per_epoch = 0, 0
        self._lr: float | None = None
        # 2. the plan every rank follows: all k_high before the first detection.
        self._high = [True] * len(self.segments)
        self._detections = 0
        self._detected_epoch = -1  # the epoch of the last detection (no norms needed after it)
        self._step = -1  # the last step selected
        self._detection_step = -1  # the step of the last detection
        # 1. rank 0's memory between detections, and this step's raw norms (not state: captured
        # again by precondition every step until the epoch's detection).
        self._prev_norms = torch.full((len(self.segments),), INITIAL_NORM, dtype=torch.float32)
        self._prev_lr = INITIAL_LR
        self._decided_norms: list[float] = []  # the norms of the last detection (rank 0's)
        self._norms: torch.Tensor | None = None
        self._indices = torch.empty(0, dtype=torch.int64)
        self._top_k = ExactTopK()

    # -- the schedule and the learning rate -----------------------------------------------------
    def start_epoch(self, epoch: int, steps_per_epoch: int) -> None:
        self._epoch, self._steps_per_epoch = int(epoch), int(steps_per_epoch)

    def set_learning_rate(self, lr: float) -> None:
        self._lr = float(lr)

    def is_detection(self, step: int) -> bool:
        """Batch 0 of an epoch that is a multiple of switch_freq (the released epoch_frac %
        switch_freq == 0). Without start_epoch: epoch 0, so step 0 only."""
        return self._epoch % self.switch_freq == 0 and step == self._epoch * self._steps_per_epoch

    # -- 1. the raw gradient's norms, before error feedback --------------------------------------
    def precondition(self, grad: torch.Tensor) -> torch.Tensor:
        # Only rank 0 decides; only in a detection epoch whose detection has not happened yet.
        # The step is not known here, so the norms are taken on every such step (one read of
        # the gradient, L small reductions, no host sync) and the detection step uses its own.
        if self.rank == 0 and self._epoch % self.switch_freq == 0 and self._detected_epoch != self._epoch:
            # One op for all parameters (fused on CUDA; vector_norm per parameter on the CPU).
            self._norms = unit_norms(grad, [end - start for start, end in self.segments])
        return grad

    # -- 1.-2. detection on rank 0, broadcast as the plan --------------------------------------
    def plan_leader(self, step: int) -> int | None:
        return 0 if self.is_detection(step) else None

    def plan_length(self, step: int) -> int:
        return len(self.segments)

    def make_plan(self, acc: torch.Tensor, step: int) -> torch.Tensor:
        if self._norms is None:
            raise RuntimeError(f"accordion: no raw gradient norms at detection step {step} "
                               f"(precondition was not called on the gradient of this step)")
        norms = self._norms.detach().float().cpu()  # one host sync per detection
        self._norms = None
        lr_dropped = self._lr is not None and self._prev_lr > self._lr
        high = decide(norms, self._prev_norms, self.threshold, self._detections == 0, lr_dropped)
        self._prev_norms = norms.clone()
        if self._lr is not None:
            self._prev_lr = self._lr
        self._decided_norms = norms.tolist()
        return high.to(torch.int64)

    # -- 3.-4. selection -------------------------------------------------------------------------
    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> torch.Tensor:
        if plan is not None:  # a detection step: rank 0's choices, on every rank
            if plan.numel() != len(self.segments):
                raise ValueError(f"accordion: a plan of {plan.numel()} choices for {len(self.segments)} parameters")
            self._high = [bool(choice) for choice in plan.tolist()]
            self._detections += 1
            self._detected_epoch = self._epoch
            self._detection_step = step
        elif self.is_detection(step):
            raise ValueError("accordion selects from rank 0's plan at detection steps: the world must serve make_plan")
        self._step = step
        ks = self._ks()
        count = sum(ks)
        if self._indices.device != acc.device or self._indices.numel() < count:
            self._indices = torch.empty(max(count, self.k), dtype=torch.int64, device=acc.device)  # once: k is the largest
        if batched_path(acc):
            # GPUs: every parameter in a bounded number of ops, no host sync (kernels/classed_topk.py).
            unit_topk(acc, [start for start, _ in self.segments], [end - start for start, end in self.segments],
                      ks, out=self._indices[:count])
        else:
            position = 0
            for (start, end), k_l in zip(self.segments, ks):
                self._top_k(acc[start:end], k_l, offset=start, out=self._indices[position : position + k_l])
                position += k_l
        return self._indices[:count]

    def _ks(self) -> list[int]:
        return [self.k_of[high][l] for l, high in enumerate(self._high)]

    def known_counts(self, step: int) -> list[int]:
        """Every rank sends sum_l K_l of the plan every rank follows."""
        return [self.current_k] * self.world_size

    @property
    def current_k(self) -> int:
        """sum_l K_l of the current plan: what each rank sends, and density/error's target."""
        return sum(self._ks())

    @property
    def current_density(self) -> float:
        return self.current_k / self.numel

    # -- method state -------------------------------------------------------------------------
    def metrics(self) -> dict[str, float | list[float]]:
        metrics: dict[str, float | list[float]] = {
            keys.ACCORDION_HIGH: float(sum(self._high)),
            keys.ACCORDION_DETECTIONS: float(self._detections),
        }
        if self._step >= 0 and self._step == self._detection_step:
            metrics[keys.ACCORDION_PARAMETER_HIGH] = [1.0 if high else 0.0 for high in self._high]
            if self._decided_norms:
                metrics[keys.ACCORDION_PARAMETER_NORMS] = list(self._decided_norms)
        return metrics

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "variant": "exdyna",
            "k_low": self.k_low,
            "k_high": self.k_high,
            "threshold": self.threshold,
            "switch_freq": self.switch_freq,
            "parameters": len(self.segments),
            "k_all_low": sum(self.k_of[False]),
            "k_all_high": sum(self.k_of[True]),
            "target": "sum_l K_l of the current plan (density ignored)",
            "requested_density": self.requested_density,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "segments": [list(segment) for segment in self.segments],
            "epoch": self._epoch,
            "steps_per_epoch": self._steps_per_epoch,
            "high": list(self._high),
            "detections": self._detections,
            "detected_epoch": self._detected_epoch,
            "step": self._step,
            "detection_step": self._detection_step,
            "prev_norms": self._prev_norms.tolist(),
            "prev_lr": self._prev_lr,
            "decided_norms": list(self._decided_norms),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if [tuple(segment) for segment in state["segments"]] != self.segments:
            raise ValueError("accordion state was saved for other parameters (a different model)")
        self._epoch = int(state["epoch"])
        self._steps_per_epoch = int(state["steps_per_epoch"])
        self._high = [bool(high) for high in state["high"]]
        self._detections = int(state["detections"])
        self._detected_epoch = int(state["detected_epoch"])
        self._step = int(state["step"])
        self._detection_step = int(state["detection_step"])
        self._prev_norms = torch.tensor(state["prev_norms"], dtype=torch.float32)
        self._prev_lr = float(state["prev_lr"])
        self._decided_norms = list(state["decided_norms"])
        self._norms = None
