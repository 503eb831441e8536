"""Language modelling (the papers' 3-layer LSTM on WikiText-2): truncated BPTT over columns.

The training stream is cut into W * B columns (the standard "batchify": token j of column c is
stream[c * rows + j]); rank r owns columns r*B .. (r+1)*B - 1, so every worker reads its own
contiguous stretches of text, and all workers together read the stream once per epoch. Windows
of `bptt` rows follow one another; the hidden state carries over from window to window
(detached: gradients stop at the window) and restarts at every epoch. Evaluation: perplexity
exp(mean cross-entropy per token) on the validation stream, batchified the same way.
"""
from __future__ import annotations

import math
from typing import Any, Iterator

import torch
import torch.nn.functional as F

from datasets.base import TokenStreams

from experiments.runformat import metric_keys as keys


def batchify(stream: torch.Tensor, columns: int) -> torch.Tensor:
    """rows x columns: column c holds stream[c * rows : (c + 1) * rows]; the tail is dropped."""
    rows = stream.numel() // columns
    return stream[: rows * columns].view(columns, rows).t().contiguous()


def windows(grid: torch.Tensor, bptt: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(inputs, targets) of consecutive windows of at most `bptt` rows; targets are shifted by one."""
    for start in range(0, grid.shape[0] - 1, bptt):
        length = min(bptt, grid.shape[0] - 1 - start)
        yield grid[start : start + length], grid[start + 1 : start + 1 + length]


class ColumnWindows:
    """One rank's columns of the training stream, as BPTT windows (the same every epoch)."""

    def __init__(self, stream: torch.Tensor, rank: int, world_size: int, batch_size: int, bptt: int) -> None:
        grid = batchify(stream, world_size * batch_size)
        self.grid = grid[:, rank * batch_size : (rank + 1) * batch_size]
        self.bptt = bptt

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(max(self.grid.shape[0] - 1, 0) / self.bptt)

    @property
    def examples(self) -> int:
        return int(self.grid.numel())

    def epoch(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return windows(self.grid, self.bptt)


def _detached(hidden: Any) -> Any:
    return tuple(part.detach() for part in hidden)


class LanguageModelTask:
    kind = "language_model"
    metric = keys.PERPLEXITY

    def __init__(self, data: TokenStreams) -> None:
        self.data = data

    def shard(self, rank: int, world_size: int, batch_size: int, seed: int, device: torch.device) -> ColumnWindows:
        return ColumnWindows(self.data.train, rank, world_size, batch_size, self.data.bptt)

    def start_epoch(self, state: dict[str, Any]) -> None:
        state.pop("hidden", None)  # a new pass over the text starts from a zero state

    def loss(self, model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor], state: dict[str, Any]) -> torch.Tensor:
        inputs, targets = batch
        device = next(model.parameters()).device
        hidden = state.get("hidden")
        if hidden is None:
            hidden = model.init_hidden(inputs.shape[1], device)
        logits, hidden = model(inputs.to(device), hidden)
        state["hidden"] = _detached(hidden)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.to(device).reshape(-1))

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, device: torch.device, limit: int | None = None) -> dict[str, float]:
        """Perplexity on the validation stream (its first `limit` tokens if given, never fewer
        than 2 * eval_batch_size: with fewer, a column would hold no target). Both numbers are
        per token, over every window. A stream too short for one row of targets is no
        evaluation: NaN, which the run reports as missing (not a loss of 0, perplexity 1)."""
        stream = self.data.valid if limit is None else self.data.valid[: max(limit, 2 * self.data.eval_batch_size)]
        grid = batchify(stream, self.data.eval_batch_size)
        hidden = model.init_hidden(grid.shape[1], device)
        loss_sum, tokens = 0.0, 0
        for inputs, targets in windows(grid, self.data.bptt):
            logits, hidden = model(inputs.to(device), hidden)
            loss_sum += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.to(device).reshape(-1), reduction="sum"))
            tokens += targets.numel()
        if not tokens:
            return {keys.PERPLEXITY: float("nan"), keys.EVAL_LOSS: float("nan")}
        mean = loss_sum / tokens
        return {keys.PERPLEXITY: math.exp(min(mean, 700.0)), keys.EVAL_LOSS: mean}
