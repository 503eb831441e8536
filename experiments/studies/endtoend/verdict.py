"""Whether a method pays on a cell: its steps ratio against its break-even (docs/endtoend.md,
"The steps ratio").

A method reaches the target sooner than the best dense baseline exactly when the steps it needs
relative to dense (its steps ratio) are fewer than its per-step speedup: the break-even is that
speedup. Both carry a range, so the rule compares ranges, never points:

- "pays": the ratio's interval lies strictly below the break-even's range (ratio.high < low);
- "does not pay": strictly above (ratio.low > high);
- "depends": they overlap or touch, with both numbers stated;
- "break-even only": no steps ratio is known; the break-even alone is the answer.

A ratio's missing lower end (a reported one-sided bound "at most 1.0") reads as 0; a missing or
infinite upper end (a seed that never reached the target) can never lie below anything. A single
seed has no interval (low = high = None): it decides nothing and reads "depends".
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from experiments.studies.endtoend.steps_ratio import StepsRatio

PAYS, DOES_NOT_PAY, DEPENDS, BREAK_EVEN_ONLY = "pays", "does not pay", "depends", "break-even only"


@dataclass(frozen=True)
class BreakEven:
    """The per-step speedup over the best dense baseline and its range (the robustness moves)."""

    value: float
    low: float
    high: float


def _number(value: float | None) -> str:
    return "open" if value is None or math.isinf(value) else f"{value:.2f}"


def describe_ratio(ratio: StepsRatio) -> str:
    """"steps ratio 1.10 (0.95-1.30, 3 seeds, runs in DIR)"."""
    mean = "unknown" if ratio.mean is None else f"{ratio.mean:.2f}"
    span = "no interval" if ratio.low is None and ratio.high is None else f"{_number(ratio.low)}-{_number(ratio.high)}"
    if ratio.low is None and ratio.high is not None:
        span = f"at most {_number(ratio.high)}"
    return f"steps ratio {mean} ({span}, {ratio.reached} of {ratio.seeds} seeds reached, {ratio.source})"


def describe_breakeven(breakeven: BreakEven) -> str:
    return f"break-even {breakeven.value:.2f}x ({breakeven.low:.2f}-{breakeven.high:.2f})"


def pays_verdict(ratio: StepsRatio | None, breakeven: BreakEven) -> tuple[str, str]:
    """(word, text): the rule of the module docstring."""
    even = describe_breakeven(breakeven)
    if ratio is None:
        return BREAK_EVEN_ONLY, f"pays if it needs at most {breakeven.value:.2f}x dense's steps ({even})"
    both = f"{describe_ratio(ratio)} against {even}"
    if ratio.low is None and ratio.high is None:  # one seed: no interval to compare
        return DEPENDS, both
    high = math.inf if ratio.high is None else ratio.high
    low = 0.0 if ratio.low is None else ratio.low
    if high < breakeven.low:
        return PAYS, both
    if low > breakeven.high:
        return DOES_NOT_PAY, both
    return DEPENDS, both
