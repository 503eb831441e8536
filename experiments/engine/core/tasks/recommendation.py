"""Implicit-feedback recommendation (NCF/NeuMF on MovieLens): positives plus sampled negatives.

Training (the NCF protocol): every epoch, each rank takes its DistributedSampler shard of the
training positives and draws `negatives_per_positive` items per positive uniformly among the
items that user never interacted with; examples are shuffled and cut into batches; the loss is
binary cross-entropy on the logits. Draws come from a generator seeded by (seed, rank, epoch).
Evaluation: HR@K and NDCG@K, the held-out positive of each test user ranked among its sampled
negatives; a negative scored exactly like the positive counts as ranked above it (pessimistic,
so that a constant model scores 0, not 1), and so does any comparison with a NaN score.
"""
from __future__ import annotations

from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch.utils.data.distributed import DistributedSampler

from datasets.base import Interactions
from experiments.runformat import metric_keys as keys
from experiments.engine.core.tasks.classification import RANK_STREAM

RESAMPLE_ROUNDS = 20  # draws that hit a known item are redrawn; after this many rounds the
# few left (users who rated nearly every item) stay as drawn


def sample_negatives(users: torch.Tensor, data: Interactions, count: int, generator: torch.Generator) -> torch.Tensor:
    """`count` items per user (len(users) x count) never seen with that user, uniformly drawn."""
    users = users.repeat_interleave(count)
    items = torch.randint(data.num_items, (users.numel(),), generator=generator)
    for _ in range(RESAMPLE_ROUNDS):
        keys = users * data.num_items + items
        position = torch.searchsorted(data.known, keys).clamp_(max=max(data.known.numel() - 1, 0))
        clash = data.known[position] == keys if data.known.numel() else torch.zeros_like(keys, dtype=torch.bool)
        if not bool(clash.any()):
            break
        items[clash] = torch.randint(data.num_items, (int(clash.sum()),), generator=generator)
    return items


class PositivesAndNegatives:
    """One rank's training examples: its shard of positives and fresh negatives every epoch."""

    def __init__(self, data: Interactions, rank: int, world_size: int, batch_size: int, seed: int) -> None:
        self.data, self.rank, self.seed, self.batch_size = data, rank, seed, batch_size
        self.sampler = DistributedSampler(
            range(data.train_users.numel()), num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=False
        )

    @property
    def examples(self) -> int:
        return len(self.sampler) * (1 + self.data.negatives_per_positive)

    @property
    def steps_per_epoch(self) -> int:
        return self.examples // self.batch_size

    def epoch(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        self.sampler.set_epoch(epoch)
        generator = torch.Generator().manual_seed(self.seed + RANK_STREAM * (self.rank + 1) + epoch)
        positives = torch.tensor(list(iter(self.sampler)), dtype=torch.int64)
        users = self.data.train_users[positives]
        negatives = sample_negatives(users, self.data, self.data.negatives_per_positive, generator)
        all_users = torch.cat([users, users.repeat_interleave(self.data.negatives_per_positive)])
        all_items = torch.cat([self.data.train_items[positives], negatives])
        labels = torch.cat([torch.ones(users.numel()), torch.zeros(negatives.numel())])
        order = torch.randperm(all_users.numel(), generator=generator)
        for step in range(self.steps_per_epoch):
            batch = order[step * self.batch_size : (step + 1) * self.batch_size]
            yield all_users[batch], all_items[batch], labels[batch]


class RecommendationTask:
    kind = "recommendation"
    metric = keys.HR10

    def __init__(self, data: Interactions) -> None:
        self.data = data
        self.metric = f"eval/hr{data.top_k}"

    def shard(self, rank: int, world_size: int, batch_size: int, seed: int, device: torch.device) -> PositivesAndNegatives:
        return PositivesAndNegatives(self.data, rank, world_size, batch_size, seed)

    def start_epoch(self, state: dict[str, Any]) -> None:
        """Nothing carries over between batches."""

    def loss(self, model: torch.nn.Module, batch: tuple[torch.Tensor, ...], state: dict[str, Any]) -> torch.Tensor:
        users, items, labels = batch
        device = next(model.parameters()).device
        return F.binary_cross_entropy_with_logits(model(users.to(device), items.to(device)), labels.to(device))

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, device: torch.device, limit: int | None = None, chunk: int = 4096) -> dict[str, float]:
        """HR@K and NDCG@K over the test users (the first `limit` of them if given)."""
        data, top_k = self.data, self.data.top_k
        candidates = torch.cat([data.test_items[:, None], data.test_negatives], dim=1)[:limit]  # positive first
        test_users = data.test_users[:limit]
        hits, gains = 0, 0.0
        for start in range(0, candidates.shape[0], chunk):
            items = candidates[start : start + chunk]
            users = test_users[start : start + chunk, None].expand_as(items)
            scores = model(users.reshape(-1).to(device), items.reshape(-1).to(device)).view(items.shape).cpu()
            # Negatives at or above the positive: all but those strictly below it, so that a NaN
            # score (comparing false with everything) ranks pessimistically too, never first.
            rank = (~(scores[:, 1:] < scores[:, :1])).sum(dim=1)
            hit = rank < top_k
            hits += int(hit.sum())
            gains += float((1.0 / torch.log2(rank[hit].double() + 2.0)).sum())
        count = max(candidates.shape[0], 1)
        return {f"eval/hr{top_k}": hits / count, f"eval/ndcg{top_k}": gains / count}
