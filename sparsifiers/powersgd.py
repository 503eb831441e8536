"""PowerSGD: every weight matrix is sent as two thin factors from one step of power iteration.

Thijs Vogels, Sai Praneeth Karimireddy and Martin Jaggi, "PowerSGD: Practical Low-Rank Gradient
Compression for Distributed Optimization", NeurIPS 2019; computed exactly as torch's DDP hook
(`torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook.powerSGD_hook`, batching off) with
the whole model as one bucket, tensors in Layout order. Steps (numbered in the body):

0. Before step `start_iter`: torch's vanilla all-reduce, sum_r (acc_r / W); nothing is kept.
1. Error feedback: acc_r = grad_r + residual_r (the step's accumulate rule, as the hook's
   `input_tensor.add_(error)`).
2. Per parameter tensor, M = tensor.view(shape[0], -1), n x m, r' = min(n, m, r); compressed iff
   (n + m) r' * min_compression_rate < n m (torch's `_should_compress`); the others (biases, small
   tensors) are sent whole.
3. The uncompressed values are all-reduced (sum) and divided by W.
4. Q: at its first use (every step without warm start) standard normal, from a CPU generator
   seeded with the next draw of numpy's RandomState(seed), filled in torch's order (tensors
   grouped by matrix shape, groups in order of first appearance), then orthogonalized; with warm
   start, the last step's mean Q orthogonalized again.
5. P_r = M_r Q; P = sum_r P_r (all-reduce); P orthogonalized (Gram-Schmidt for r' <= 2, QR
   otherwise, as torch's `_orthogonalize`).
6. Q_r = M_r^T P; Q = sum_r Q_r / W (all-reduce).
7. The aggregate: P Q^T for the compressed tensors, the mean for the others.
8. Residual: residual_r = acc_r - aggregate over the whole vector (the hook's
   `input_tensor_cp - input_tensor`: the uncompressed tensors keep acc_r - mean too), with
   error feedback; nothing without.

The exchange (experiments/engine/core/exchange/dense.py, `low_rank_allreduce`) owns the three all-reduces
and calls the `low_rank_*` hooks below (its `capabilities.LowRank`); this class calls no collective.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from experiments.runformat.errors import require
from sparsifiers.common.base import SelectionScope, Sparsifier
from sparsifiers.common.exchange_kinds import ExchangeKind, WireAllReduce
from sparsifiers.common.layout import Layout, Segment

FP32_BYTES = 4  # every run's flat gradient is float32, and PowerSGD sends it as it is
SEED_BOUND = 1_000_000_000  # torch's state.rng.randint(1_000_000_000)


@dataclass(frozen=True)
class Factored:
    """One compressed tensor: its n x m matrix at `offset`, rank r', and its P and Q slices."""

    offset: int
    rows: int
    cols: int
    rank: int
    p_offset: int
    q_offset: int


def should_compress(rows: int, cols: int, rank: int, min_compression_rate: float) -> bool:
    """torch's `_should_compress`: worth it when the factors are small enough."""
    return (rows + cols) * rank * min_compression_rate < rows * cols


def orthogonalize(matrices: torch.Tensor, epsilon: float) -> None:
    """torch's `_orthogonalize`, in place on a [1, n, r] batch: Gram-Schmidt for r <= 2, QR
    otherwise. With epsilon 0 a zero column becomes NaN, as in torch."""
    rank = matrices.shape[2]
    if rank <= 2:
        for i in range(rank):
            col = matrices[:, :, i : i + 1]
            norm = torch.linalg.vector_norm(col, dim=1, keepdim=True)
            col /= norm if epsilon == 0 else norm + epsilon
            if i + 1 < rank:
                rest = matrices[:, :, i + 1 :]
                rest -= torch.sum(col * rest, dim=1, keepdim=True) * col
    else:
        torch.linalg.qr(matrices, out=(matrices, torch.empty(1, rank, rank, dtype=matrices.dtype, device=matrices.device)))


def plan_factors(layout: Layout, rank: int, min_compression_rate: float) -> tuple[list[Factored], list[Segment]]:
    """Step 2: the compressed tensors in torch's order (grouped by matrix shape, groups in order
    of first appearance) with their P and Q slices, and the tensors sent whole, in Layout order.
    A 0-d tensor has no rows: sent whole (torch's hook would fail on it)."""
    groups: dict[tuple[int, int], list[Segment]] = {}
    whole: list[Segment] = []
    for segment in layout.segments:
        if not segment.shape or segment.numel == 0:
            whole.append(segment)
            continue
        rows = segment.shape[0]
        cols = segment.numel // rows
        if should_compress(rows, cols, min(rows, cols, rank), min_compression_rate):
            groups.setdefault((rows, cols), []).append(segment)
        else:
            whole.append(segment)
    factored, p_offset, q_offset = [], 0, 0
    for (rows, cols), segments in groups.items():
        for segment in segments:
            r = min(rows, cols, rank)
            factored.append(Factored(segment.offset, rows, cols, r, p_offset, q_offset))
            p_offset, q_offset = p_offset + rows * r, q_offset + cols * r
    return factored, whole


class PowerSGD(Sparsifier):
    """torch's powerSGD_hook over the whole model: low-rank factors of every weight matrix."""

    name = "powersgd"
    scope = SelectionScope.WHOLE
    exchanges = (ExchangeKind.LOW_RANK,)

    def __init__(self, layout: Layout, world_size: int, rank: int, density: float = 1.0,
                 matrix_approximation_rank: int = 1, start_iter: int = 1000, min_compression_rate: float = 2.0,
                 warm_start: bool = True, orthogonalization_epsilon: float = 0.0, **knobs) -> None:
        # Every coordinate of the aggregate gets a value, as dense's: the target density is 1
        # whatever `density` says (a sweep may set sparsifier.density for every method).
        super().__init__(layout, world_size, rank, density=1.0, **knobs)
        self.requested_density = float(density)
        require(int(matrix_approximation_rank) >= 1,
                f"sparsifier.matrix_approximation_rank must be >= 1, got {matrix_approximation_rank}")
        require(min_compression_rate > 0, f"sparsifier.min_compression_rate must be > 0, got {min_compression_rate}")
        require(orthogonalization_epsilon >= 0,
                f"sparsifier.orthogonalization_epsilon must be >= 0, got {orthogonalization_epsilon}")
        # torch's PowerSGDState refuses this too (DDP rebuilds its buckets after step 1); kept so
        # that a run means what the same settings mean in torch.
        require(start_iter >= 2 or not (self.error_feedback or warm_start),
                f"sparsifier.start_iter must be >= 2 with error feedback or warm start (torch's PowerSGDState), "
                f"got {start_iter}: set sparsifier.start_iter=2")
        require(start_iter >= 0, f"sparsifier.start_iter must be >= 0, got {start_iter}")
        self.matrix_rank = int(matrix_approximation_rank)
        self.start_iter = int(start_iter)
        self.min_compression_rate = float(min_compression_rate)
        self.warm_start = bool(warm_start)
        self.epsilon = float(orthogonalization_epsilon)
        self.factored, self.whole = plan_factors(layout, self.matrix_rank, self.min_compression_rate)
        self.p_numel = sum(f.rows * f.rank for f in self.factored)
        self.q_numel = sum(f.cols * f.rank for f in self.factored)
        self.uncompressed_numel = sum(s.numel for s in self.whole)
        self._seeds = np.random.RandomState(self.seed)  # torch's state.rng: same on every rank
        self._draws = 0  # seeds drawn so far (the RandomState is rebuilt from it on resume)
        self._q: torch.Tensor | None = None  # the mean Q of the last compressed step (warm start)
        self._p: torch.Tensor | None = None  # this step's orthogonalized P, between the all-reduces

    # -- what the exchange calls -------------------------------------------------------------
    def select(self, acc: torch.Tensor, step: int, plan: torch.Tensor | None = None) -> None:
        return None  # no selection: every coordinate gets a value

    def low_rank_active(self, step: int) -> bool:
        return step >= self.start_iter  # 0. vanilla all-reduce before start_iter

    def low_rank_uncompressed(self, acc: torch.Tensor) -> torch.Tensor:
        # 3. the tensors sent whole, one contiguous message (torch's uncompressed_tensors_memory)
        if not self.whole:
            return acc.new_empty(0)
        return torch.cat([acc[s.offset : s.end] for s in self.whole])

    def low_rank_p(self, acc: torch.Tensor) -> torch.Tensor:
        q = self._start_q(acc)  # 4.
        p = acc.new_empty(self.p_numel)
        for f in self.factored:  # 5. P_r = M_r Q
            torch.bmm(self._matrix(acc, f), self._q_of(q, f), out=self._p_of(p, f))
        return p

    def low_rank_q(self, acc: torch.Tensor, p_sum: torch.Tensor) -> torch.Tensor:
        self._p = p_sum.clone()  # every hosted rank its own copy: orthogonalized in place
        for f in self.factored:  # 5. orthogonalize the summed P
            orthogonalize(self._p_of(self._p, f), self.epsilon)
        q = acc.new_empty(self.q_numel)
        for f in self.factored:  # 6. Q_r = M_r^T P
            torch.bmm(self._matrix(acc, f).transpose(1, 2), self._p_of(self._p, f), out=self._q_of(q, f))
        return q

    def low_rank_decompress(self, uncompressed: torch.Tensor, q: torch.Tensor, out: torch.Tensor | None) -> None:
        if out is not None:
            offset = 0  # 7. the mean where sent whole, P Q^T elsewhere
            for segment in self.whole:
                out[segment.offset : segment.end].copy_(uncompressed[offset : offset + segment.numel])
                offset += segment.numel
            for f in self.factored:
                torch.bmm(self._p_of(self._p, f), self._q_of(q, f).transpose(1, 2), out=self._matrix(out, f))
        # The warm start of the next compressed step; without warm start torch clears its P and Q
        # memories (a fresh random Q next step), on every hosted rank alike, not only the one
        # that wrote `out` (a checkpoint holds the same state whatever rank it comes from).
        self._q = q.clone() if self.warm_start else None

    # -- step 4: the Q the power iteration starts from ----------------------------------------
    def _start_q(self, acc: torch.Tensor) -> torch.Tensor:
        """Last step's Q orthogonalized (warm start), or a fresh one drawn as torch draws it."""
        if self._q is not None and self.warm_start:
            q = self._q.to(acc.device)
            for f in self.factored:
                orthogonalize(self._q_of(q, f), self.epsilon)
            self._q = q
            return q
        generator = torch.Generator().manual_seed(int(self._seeds.randint(SEED_BOUND)))
        self._draws += 1
        q = torch.empty(self.q_numel, dtype=acc.dtype)
        for f in self.factored:  # on the CPU, in torch's order, then orthogonalized there
            block = self._q_of(q, f)
            block.copy_(torch.randn(*block.shape, generator=generator, dtype=acc.dtype))
            orthogonalize(block, self.epsilon)
        self._q = q.to(acc.device)
        return self._q

    # -- views -------------------------------------------------------------------------------
    @staticmethod
    def _matrix(flat: torch.Tensor, f: Factored) -> torch.Tensor:
        return flat[f.offset : f.offset + f.rows * f.cols].view(1, f.rows, f.cols)

    @staticmethod
    def _p_of(p: torch.Tensor, f: Factored) -> torch.Tensor:
        return p[f.p_offset : f.p_offset + f.rows * f.rank].view(1, f.rows, f.rank)

    @staticmethod
    def _q_of(q: torch.Tensor, f: Factored) -> torch.Tensor:
        return q[f.q_offset : f.q_offset + f.cols * f.rank].view(1, f.cols, f.rank)

    # -- sizes, record, resume ---------------------------------------------------------------
    def wire_allreduces(self, step: int) -> tuple[WireAllReduce, ...]:
        """Before start_iter the vanilla all-reduce of N values; then the three messages (an
        empty one is not sent, see the exchange). The sizes depend on the model only."""
        if not self.low_rank_active(step):
            return (WireAllReduce("values", self.numel, FP32_BYTES),)
        sizes = (("uncompressed", self.uncompressed_numel), ("p", self.p_numel), ("q", self.q_numel))
        return tuple(WireAllReduce(what, elements, FP32_BYTES) for what, elements in sizes if elements)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(), "matrix_approximation_rank": self.matrix_rank, "start_iter": self.start_iter,
            "min_compression_rate": self.min_compression_rate, "warm_start": self.warm_start,
            "orthogonalization_epsilon": self.epsilon, "compressed_tensors": len(self.factored),
            "wire": {"uncompressed": self.uncompressed_numel, "p": self.p_numel, "q": self.q_numel,
                     "element_bytes": FP32_BYTES},
        }

    def state_dict(self) -> dict[str, Any]:
        return {"q": None if self._q is None else self._q.detach().cpu().clone(), "draws": self._draws}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if set(state) != {"q", "draws"}:
            raise ValueError(f"powersgd state needs q and draws; got {sorted(state)}")
        self._q = None if state["q"] is None else state["q"].clone()
        self._seeds = np.random.RandomState(self.seed)
        for _ in range(int(state["draws"])):  # the seeds already used, drawn again
            self._seeds.randint(SEED_BOUND)
        self._draws = int(state["draws"])
