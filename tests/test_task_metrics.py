"""Every task metric against a value worked out by hand: accuracy, top-5 and loss (classification),
loss and perplexity (language model), HR@K and NDCG@K (recommendation).

Each test gives a task's real `evaluate` a model whose outputs are a fixed table (looked up by
example, by token, or by (user, item)) and the task's real data container, built from small
tensors, and compares the result with numbers written out here or computed in float64 with plain
Python (`math`), never with the torch call the task makes. The boundaries each metric has are
pinned: ties, the K cut, an uneven last batch or chunk, the eval limit, tokens against rows.
"""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from datasets.base import DatasetSplits, Interactions, TokenStreams
from experiments.runformat import metric_keys as keys
from experiments.engine.core.tasks.classification import ClassificationTask
from experiments.engine.core.tasks.language_model import LanguageModelTask
from experiments.engine.core.tasks.recommendation import RecommendationTask

CPU = torch.device("cpu")


# -- classification: accuracy, top-5, loss per example ----------------------------------------------
class LookupClassifier(nn.Module):
    """The logits of test example i are row i of a fixed table: the test inputs hold their own
    index. Records the size of every batch it is given."""

    def __init__(self, logits: list[list[float]]) -> None:
        super().__init__()
        self.register_buffer("table", torch.tensor(logits, dtype=torch.float32))
        self.batches: list[int] = []

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        self.batches.append(inputs.shape[0])
        return self.table[inputs.view(-1).long()]


def weighted_logits(weights: dict[int, float], classes: int = 10) -> list[float]:
    """Logits ln(w): softmax gives class c the probability w_c / sum(w) (weight 1 where unnamed)."""
    return [math.log(weights.get(c, 1.0)) for c in range(classes)]


def classification(labels: list[int], classes: int, test_batch_size: int) -> ClassificationTask:
    count = len(labels)
    index_images = torch.arange(count, dtype=torch.float32).view(count, 1, 1, 1)  # example i holds i
    data = DatasetSplits("fixed", index_images, torch.tensor(labels), index_images, torch.tensor(labels), classes,
                         test_batch_size=test_batch_size)
    return ClassificationTask(data)


# Five examples, ten classes. Probability of the label, argmax, and where the label ranks:
#   0: label 2, w_2 = 6, the rest 1             -> p = 6/15, argmax 2 (right), 1st (top-5)
#   1: label 0, w_7 = 3, w_0 = 2                -> p = 2/13, argmax 7 (wrong), 2nd (top-5)
#   2: label 4, w = 4 for 0,1,2,3,5, w_4 = 2    -> p = 2/26, argmax 0 (wrong), 6th (not top-5)
#   3: label 9, w_9 = 5                         -> p = 5/14, argmax 9 (right), 1st (top-5)
#   4: label 5, w = 3 for 0,1,2,3, w_5 = 2      -> p = 2/19, argmax 0 (wrong), 5th exactly (top-5)
LABELS = [2, 0, 4, 9, 5]
LOGITS = [
    weighted_logits({2: 6}),
    weighted_logits({7: 3, 0: 2}),
    weighted_logits({0: 4, 1: 4, 2: 4, 3: 4, 5: 4, 4: 2}),
    weighted_logits({9: 5}),
    weighted_logits({0: 3, 1: 3, 2: 3, 3: 3, 5: 2}),
]
LOSSES = [math.log(15 / 6), math.log(13 / 2), math.log(26 / 2), math.log(14 / 5), math.log(19 / 2)]  # -ln p


@pytest.mark.parametrize("test_batch_size", [2, 3, 5, 1024])
def test_classification_metrics_by_hand(test_batch_size: int) -> None:
    """2 of 5 right -> 0.4; 4 of 5 labels in the top 5 (one exactly 5th) -> 0.8; the loss is the
    mean of -ln p over the 5 examples, however the test split is cut into batches (2 and 3 do not
    divide 5: the last batch is shorter and counts fully)."""
    task = classification(LABELS, 10, test_batch_size)
    model = LookupClassifier(LOGITS)
    result = task.evaluate(model, CPU)
    assert result[keys.ACCURACY] == 2 / 5
    assert result[keys.TOP5] == 4 / 5
    assert result[keys.EVAL_LOSS] == pytest.approx(math.fsum(LOSSES) / 5, rel=1e-6)
    expected_batches = {2: [2, 2, 1], 3: [3, 2], 5: [5], 1024: [5]}[test_batch_size]
    assert model.batches == expected_batches


def test_classification_loss_is_per_example_not_per_batch() -> None:
    """Batches of 2, 2 and 1: the mean of the three batch means would weigh example 4 twice as
    much as the others; the loss is the mean over the examples."""
    result = classification(LABELS, 10, 2).evaluate(LookupClassifier(LOGITS), CPU)
    per_example = math.fsum(LOSSES) / 5
    per_batch = (math.fsum(LOSSES[0:2]) / 2 + math.fsum(LOSSES[2:4]) / 2 + LOSSES[4]) / 3
    assert abs(per_example - per_batch) > 0.05  # the two readings really differ on this data
    assert result[keys.EVAL_LOSS] == pytest.approx(per_example, rel=1e-6)


@pytest.mark.parametrize(
    "limit, accuracy, top5, batches",
    [
        (1, 1 / 1, 1 / 1, [1]),
        (3, 1 / 3, 2 / 3, [2, 1]),  # examples 0, 1, 2: one right, two in the top 5
        (4, 2 / 4, 3 / 4, [2, 2]),
        (5, 2 / 5, 4 / 5, [2, 2, 1]),
        (6, 2 / 5, 4 / 5, [2, 2, 1]),  # more than the split holds: all of it
        (None, 2 / 5, 4 / 5, [2, 2, 1]),
    ],
)
def test_classification_limit_takes_the_first_examples(limit, accuracy, top5, batches) -> None:
    model = LookupClassifier(LOGITS)
    result = classification(LABELS, 10, 2).evaluate(model, CPU, limit)
    count = min(limit or 5, 5)
    assert model.batches == batches
    assert result[keys.ACCURACY] == accuracy
    assert result[keys.TOP5] == top5
    assert result[keys.EVAL_LOSS] == pytest.approx(math.fsum(LOSSES[:count]) / count, rel=1e-6)


def test_classification_ties_as_argmax_and_topk_break_them() -> None:
    """All ten logits equal, labels 0..9. torch.argmax documents that it returns the first maximal
    index, so only label 0 is right: accuracy 1/10 (chance, neither pessimistic nor optimistic;
    recommendation's rule is the pessimistic one). torch.topk does not document which of tied
    values it returns, only that it returns k of them: exactly 5 of the 10 labels are in the top
    5, whichever they are. Every example's loss is ln 10."""
    labels = list(range(10))
    result = classification(labels, 10, 4).evaluate(LookupClassifier([[0.0] * 10] * 10), CPU)
    assert result[keys.ACCURACY] == 1 / 10
    assert result[keys.TOP5] == 5 / 10
    assert result[keys.EVAL_LOSS] == pytest.approx(math.log(10), rel=1e-6)
    # The label tied with a later class is right, tied with an earlier one wrong (first index wins).
    tied = [weighted_logits({1: 5, 3: 5})] * 2
    assert classification([1, 3], 10, 4).evaluate(LookupClassifier(tied), CPU)[keys.ACCURACY] == 1 / 2


def test_top5_only_with_more_than_five_classes() -> None:
    """With 5 classes every label is in the top 5 by construction: top-5 is not reported."""
    logits = [weighted_logits({0: 2}, classes=5), weighted_logits({0: 2}, classes=5)]
    result = classification([0, 4], 5, 8).evaluate(LookupClassifier(logits), CPU)
    assert set(result) == {keys.ACCURACY, keys.EVAL_LOSS}
    assert result[keys.ACCURACY] == 1 / 2
    assert result[keys.EVAL_LOSS] == pytest.approx((math.log(6 / 2) + math.log(6 / 1)) / 2, rel=1e-6)


# -- language model: loss and perplexity per token ----------------------------------------------------
# The next token's distribution depends on the current token only: p(b | a) = W[a][b] / sum(W[a]).
BIGRAM_WEIGHTS = [[2.0, 1.0, 1.0], [1.0, 2.0, 1.0], [1.0, 1.0, 6.0]]


def bigram_loss(a: int, b: int) -> float:
    """-ln p(b | a) in float64."""
    return math.log(sum(BIGRAM_WEIGHTS[a]) / BIGRAM_WEIGHTS[a][b])


class BigramTable(nn.Module):
    """logits = ln W[token]: the LSTM task's interface (`init_hidden(batch, device)`, then
    `model(inputs, hidden)` -> (logits, hidden)). The hidden state counts the calls, so that the
    test sees whether it is carried from window to window; every window's inputs are recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.tensor(BIGRAM_WEIGHTS, dtype=torch.float64).log().float())
        self.init_sizes: list[int] = []
        self.windows: list[torch.Tensor] = []
        self.hidden_seen: list[int] = []

    def init_hidden(self, batch_size: int, device: torch.device) -> tuple[torch.Tensor]:
        self.init_sizes.append(batch_size)
        return (torch.zeros((), dtype=torch.int64),)

    def forward(self, tokens: torch.Tensor, hidden: tuple[torch.Tensor]) -> tuple[torch.Tensor, tuple[torch.Tensor]]:
        self.windows.append(tokens.clone())
        self.hidden_seen.append(int(hidden[0]))
        return self.table[tokens], (hidden[0] + 1,)


def language_model(valid: list[int], eval_batch_size: int, bptt: int) -> LanguageModelTask:
    stream = torch.tensor(valid, dtype=torch.int64)
    return LanguageModelTask(TokenStreams("fixed", stream, stream, stream, ["a", "b", "c"], bptt=bptt,
                                          eval_batch_size=eval_batch_size))


def column_pairs(stream: list[int], columns: int) -> list[tuple[int, int]]:
    """The (token, next token) pairs evaluation predicts, by the definition: the stream is cut into
    `columns` contiguous columns of len // columns tokens (the tail dropped); within a column every
    token but the last predicts the next."""
    rows = len(stream) // columns
    pairs = []
    for c in range(columns):
        column = stream[c * rows : (c + 1) * rows]
        pairs += list(zip(column[:-1], column[1:]))
    return pairs


def test_lm_loss_and_perplexity_per_token_over_every_window() -> None:
    """17 tokens, 2 columns of 8 (the 17th dropped), bptt 3: windows of 3, 3 and 1 rows (6, 6 and 2
    tokens). Column 0 is six (2 -> 2) then (2 -> 0), column 1 six (0 -> 0) then (0 -> 1): the short
    last window holds the two costly tokens. The loss is the mean over the 14 tokens; a mean of the
    window means, or a division by rows, gives another number."""
    valid = [2] * 7 + [0] + [0] * 7 + [1] + [2]
    task = language_model(valid, eval_batch_size=2, bptt=3)
    model = BigramTable()
    result = task.evaluate(model, CPU)
    expected = (6 * math.log(4 / 3) + math.log(8) + 6 * math.log(2) + math.log(4)) / 14
    assert result[keys.EVAL_LOSS] == pytest.approx(expected, rel=1e-6)
    assert result[keys.PERPLEXITY] == pytest.approx(math.exp(expected), rel=1e-6)
    window_means = [(3 * math.log(4 / 3) + 3 * math.log(2)) / 6] * 2 + [(math.log(8) + math.log(4)) / 2]
    assert abs(math.fsum(window_means) / 3 - expected) > 0.1  # the per-window reading differs here
    # The windows the model saw: 3, 3 and 1 rows of both columns, the hidden state carried on.
    assert [tuple(w.shape) for w in model.windows] == [(3, 2), (3, 2), (1, 2)]
    assert torch.equal(torch.cat(model.windows), torch.tensor([[2, 0]] * 7))
    assert model.init_sizes == [2] and model.hidden_seen == [0, 1, 2]


VALID = [(i * i + i // 3) % 3 for i in range(30)]  # 30 tokens, every pair of tokens present


@pytest.mark.parametrize(
    "limit, evaluated, targets",
    [
        (None, 30, 28),  # 2 columns of 15: 14 targets each
        (12, 12, 10),  # the first 12 tokens: 2 columns of 6
        (11, 11, 8),  # the first 11: 2 columns of 5, the 11th dropped
        (5, 5, 2),  # 2 columns of 2 (the 5th dropped): one target each
        (4, 4, 2),  # the floor, 2 * eval_batch_size: every column has one target
        (3, 4, 2),  # below the floor: the first 4 tokens, as with limit 4
        (1, 4, 2),
    ],
)
def test_lm_limit_takes_the_first_tokens_with_a_floor(limit, evaluated, targets) -> None:
    """`limit` evaluates the first `limit` validation tokens, but never fewer than
    2 * eval_batch_size (here 4): with fewer, a column would hold no target."""
    model = BigramTable()
    result = language_model(VALID, eval_batch_size=2, bptt=3).evaluate(model, CPU, limit)
    pairs = column_pairs(VALID[:evaluated], 2)
    assert sum(w.numel() for w in model.windows) == len(pairs) == targets
    expected = math.fsum(bigram_loss(a, b) for a, b in pairs) / targets
    assert result[keys.EVAL_LOSS] == pytest.approx(expected, rel=1e-6)
    assert result[keys.PERPLEXITY] == pytest.approx(math.exp(expected), rel=1e-6)


def test_lm_evaluation_with_no_target_is_missing() -> None:
    """10 tokens in 8 columns is one row: nothing to predict. That is no evaluation (NaN, which a
    run reports as missing and flags), not a loss of 0 and the best perplexity there is, 1."""
    result = language_model(VALID[:10], eval_batch_size=8, bptt=3).evaluate(BigramTable(), CPU)
    assert math.isnan(result[keys.EVAL_LOSS]) and math.isnan(result[keys.PERPLEXITY])


# -- recommendation: HR@K and NDCG@K --------------------------------------------------------------------
class ScoreTable(nn.Module):
    """The NCF interface, `model(users, items)` -> one score per pair, from a fixed
    [users x items] table. Records how many pairs each call scores."""

    def __init__(self, scores: list[list[float]]) -> None:
        super().__init__()
        self.register_buffer("table", torch.tensor(scores, dtype=torch.float32))
        self.calls: list[int] = []

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        self.calls.append(users.numel())
        return self.table[users, items]


def recommendation(users: int, top_k: int) -> RecommendationTask:
    """Every test user's held-out positive is item 0, its sampled negatives items 1..5."""
    none = torch.empty(0, dtype=torch.int64)
    data = Interactions(
        "fixed", num_users=users, num_items=6, train_users=none, train_items=none,
        test_users=torch.arange(users), test_items=torch.zeros(users, dtype=torch.int64),
        test_negatives=torch.arange(1, 6).repeat(users, 1), top_k=top_k,
    )
    return RecommendationTask(data)


# Scores of items 0 (the positive) .. 5 per user; K = 3, so ranks 0, 1, 2 hit and 3 misses.
SCORES = [
    [0.9, 0.1, 0.2, 0.3, 0.4, 0.5],  # rank 0: hit, gain 1/log2(2) = 1
    [0.5, 0.6, 0.1, 0.2, 0.3, 0.4],  # rank 1: hit, gain 1/log2(3)
    [0.5, 0.6, 0.7, 0.1, 0.2, 0.3],  # rank 2 = K - 1: hit, gain 1/log2(4) = 1/2
    [0.5, 0.6, 0.7, 0.8, 0.1, 0.2],  # rank 3 = K: miss
    [0.5, 0.6, 0.7, 0.5, 0.1, 0.2],  # two above and one tied: the tie counts above, rank 3: miss
    [0.5, 0.5, 0.1, 0.2, 0.3, 0.4],  # one tied: rank 1, hit, gain 1/log2(3)
]
GAINS = [1.0, 1 / math.log2(3), 1 / 2, 0.0, 0.0, 1 / math.log2(3)]


@pytest.mark.parametrize("chunk", [1, 4, 6, 4096])
def test_hr_and_ndcg_by_hand(chunk: int) -> None:
    """4 of 6 positives in the top 3 -> HR@3 = 4/6; NDCG@3 is the mean of 1/log2(rank + 2) over
    the users (0 for a miss), however the users are cut into chunks (4 leaves a last chunk of 2)."""
    model = ScoreTable(SCORES)
    result = recommendation(6, top_k=3).evaluate(model, CPU, chunk=chunk)
    assert set(result) == {"eval/hr3", "eval/ndcg3"}
    assert result["eval/hr3"] == 4 / 6
    assert result["eval/ndcg3"] == pytest.approx(math.fsum(GAINS) / 6, rel=1e-12)
    users_per_call = {1: [1] * 6, 4: [4, 2], 6: [6], 4096: [6]}[chunk]
    assert model.calls == [6 * users for users in users_per_call]  # the positive and 5 negatives each


def test_the_k_cut_and_the_gain_at_each_rank() -> None:
    """One user at a time: the positive with r negatives strictly above it is at rank r; ranks 0
    .. K-1 hit with gain 1/log2(r + 2) (1, 0.6309..., 0.5), rank K misses."""
    for above, (hit, gain) in enumerate([(1.0, 1.0), (1.0, 0.6309297535714575), (1.0, 0.5), (0.0, 0.0), (0.0, 0.0)]):
        scores = [[0.5] + [0.9] * above + [0.1] * (5 - above)]
        result = recommendation(1, top_k=3).evaluate(ScoreTable(scores), CPU)
        assert (result["eval/hr3"], result["eval/ndcg3"]) == (hit, pytest.approx(gain, rel=1e-12)), f"rank {above}"


@pytest.mark.parametrize("limit, hr, gains", [(1, 1 / 1, GAINS[:1]), (3, 3 / 3, GAINS[:3]), (4, 3 / 4, GAINS[:4]),
                                              (6, 4 / 6, GAINS), (7, 4 / 6, GAINS), (None, 4 / 6, GAINS)])
def test_recommendation_limit_takes_the_first_users(limit, hr, gains) -> None:
    model = ScoreTable(SCORES)
    result = recommendation(6, top_k=3).evaluate(model, CPU, limit, chunk=2)
    assert result["eval/hr3"] == hr
    assert result["eval/ndcg3"] == pytest.approx(math.fsum(gains) / len(gains), rel=1e-12)
    assert sum(model.calls) == 6 * len(gains)


def test_ties_with_the_positive_rank_above_it() -> None:
    """The documented pessimistic rule: a negative scored exactly like the positive ranks above it,
    so a constant model scores 0, not 1 (5 negatives, K = 3: the positive is at rank 5)."""
    result = recommendation(4, top_k=3).evaluate(ScoreTable([[0.25] * 6] * 4), CPU)
    assert result == {"eval/hr3": 0.0, "eval/ndcg3": 0.0}
    # Tied with two negatives, below none: rank 2, still a hit, gain 1/2.
    tied = recommendation(1, top_k=3).evaluate(ScoreTable([[0.5, 0.5, 0.5, 0.1, 0.1, 0.1]]), CPU)
    assert tied == {"eval/hr3": 1.0, "eval/ndcg3": 0.5}


def test_a_nan_score_never_ranks_the_positive_higher() -> None:
    """NaN compares false with everything: counted as "not at or above the positive", a NaN model
    would put every positive first (HR 1, NDCG 1). The pessimistic rule holds for it too: a NaN
    negative ranks above the positive, and a NaN positive below every negative."""
    nan = float("nan")
    scores = [
        [nan] * 6,  # rank 5: miss
        [nan, 0.1, 0.2, 0.3, 0.4, 0.5],  # rank 5: miss
        [0.5, nan, 0.1, 0.2, 0.3, 0.4],  # one NaN negative above: rank 1, gain 1/log2(3)
    ]
    result = recommendation(3, top_k=3).evaluate(ScoreTable(scores), CPU)
    assert result["eval/hr3"] == 1 / 3
    assert result["eval/ndcg3"] == pytest.approx(1 / math.log2(3) / 3, rel=1e-12)
