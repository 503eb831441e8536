"""When a run diverged: one rule, read by the rank (summary.json's `diverged`) and by the
analysis (runs logged before summary.json recorded it), so both call the same run diverged.

A run DIVERGED when either
- its training loss (`train/loss`, the mean over ranks of each logged row) is over LOSS_FACTOR
  times its first logged value for LOSS_ROWS logged rows in a row (`at_step`: the first of those
  rows); or
- its accuracy fell back to chance: its last evaluation's `eval/accuracy` is at most 1/classes +
  CHANCE_MARGIN although an earlier evaluation was above that (`at_step`: the first evaluation at
  chance after the last one above it). Only for classification; other tasks (perplexity, HR@10)
  have the loss rule only.

Why these: a loss that stays several times above where training started is not noise (one bad
batch lifts one row, not five); ResNet-18 with DEFT at d = 0.001, W = 8, lr 0.1 went from 2.39 to
31.6 in 20 steps. A run that never got above chance is not called diverged (a short or
random-label run has not learned yet; its loss says whether it blew up): only one that learned
and lost it. Non-finite values never reach this rule: a non-finite loss fails the run
(experiments/engine/core/finite.py), and a skipped step's row holds none (it is passed over).

Bottom floor (stdlib only): the engine and the analysis both import it.
"""
from __future__ import annotations

import math
from typing import Iterable, Optional

LOSS_FACTOR = 3.0
LOSS_ROWS = 5
CHANCE_MARGIN = 0.01

Series = Iterable[tuple[float, Optional[float]]]  # (step, value) in step order; None or NaN: not logged


def _finite(series: Series) -> list[tuple[int, float]]:
    return [(int(step), float(value)) for step, value in series if value is not None and math.isfinite(value)]


def loss_blew_up(losses: Series) -> dict | None:
    """{"at_step", "why"} when LOSS_ROWS logged rows in a row hold a loss over LOSS_FACTOR times
    the first logged one; None otherwise (and when the first loss is not positive: no scale)."""
    rows = _finite(losses)
    if not rows or rows[0][1] <= 0:
        return None
    first, streak = rows[0][1], []
    for step, loss in rows[1:]:
        streak = streak + [step] if loss > LOSS_FACTOR * first else []
        if len(streak) == LOSS_ROWS:
            return {"at_step": streak[0],
                    "why": f"training loss over {LOSS_FACTOR:g} times its first logged value ({first:.4g}) for "
                           f"{LOSS_ROWS} logged rows in a row from step {streak[0]} (reached {loss:.4g})"}
    return None


def fell_to_chance(accuracies: Series, classes: int | None) -> dict | None:
    """{"at_step", "why"} when the last evaluation's accuracy is at chance (<= 1/classes +
    CHANCE_MARGIN) after an earlier one above it; None otherwise, or without a class count."""
    rows = _finite(accuracies)
    if not classes or classes < 2 or not rows:
        return None
    chance = 1.0 / classes + CHANCE_MARGIN
    above = [index for index, (_, accuracy) in enumerate(rows) if accuracy > chance]
    if rows[-1][1] > chance or not above:
        return None
    step, accuracy = rows[above[-1] + 1]
    return {"at_step": step,
            "why": f"accuracy fell to chance: {rows[-1][1]:.4g} at the last evaluation (<= 1/{classes} + "
                   f"{CHANCE_MARGIN:g}), after {max(a for _, a in rows):.4g} earlier ({accuracy:.4g} at step {step})"}


def diverged(losses: Series, accuracies: Series = (), classes: int | None = None) -> dict | None:
    """summary.json's `diverged`: the loss rule's finding, else the chance rule's, else None."""
    return loss_blew_up(losses) or fell_to_chance(accuracies, classes)


def describe(record: dict | None) -> str:
    """"diverged at step 120: ..." for a finding, "" for None."""
    return f"diverged at step {record['at_step']}: {record['why']}" if record else ""


def parse(text: str) -> dict | None:
    """describe's inverse: {"at_step", "why"} from "diverged at step 120: ...", None for "" or
    text in another form (the claims show a diverged run's step and reason as numbers)."""
    head, _, why = text.partition(": ")
    prefix = "diverged at step "
    if not head.startswith(prefix) or not head[len(prefix):].lstrip("-").isdigit():
        return None
    return {"at_step": int(head[len(prefix):]), "why": why}
