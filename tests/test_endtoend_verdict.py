"""The verdict rule (experiments/studies/endtoend/verdict.py) at its edges."""
from __future__ import annotations

import math

from experiments.studies.endtoend.steps_ratio import StepsRatio
from experiments.studies.endtoend.verdict import BreakEven, pays_verdict

EVEN = BreakEven(value=1.5, low=1.2, high=1.8)


def ratio(mean, low, high, seeds=3, reached=3, source="runs in DIR") -> StepsRatio:
    return StepsRatio("deft", "mlp on digits", mean, low, high, seeds, reached, source)


def test_strictly_below_pays_strictly_above_does_not():
    assert pays_verdict(ratio(1.0, 0.9, 1.19), EVEN)[0] == "pays"
    assert pays_verdict(ratio(2.0, 1.81, 2.2), EVEN)[0] == "does not pay"


def test_touching_intervals_depend_with_both_numbers():
    word, text = pays_verdict(ratio(1.0, 0.9, 1.2), EVEN)  # high == break-even low: touching
    assert word == "depends"
    assert "1.20" in text and "break-even 1.50x (1.20-1.80)" in text
    assert pays_verdict(ratio(2.0, 1.8, 2.2), EVEN)[0] == "depends"  # low == break-even high
    assert pays_verdict(ratio(1.5, 1.0, 2.0), EVEN)[0] == "depends"  # overlapping


def test_a_seed_that_never_reached_the_target_never_pays():
    censored = ratio(None, 0.5, math.inf, reached=2)
    word, text = pays_verdict(censored, EVEN)
    assert word == "depends" and "open" in text and "2 of 3 seeds" in text
    assert pays_verdict(ratio(None, 1.9, math.inf, reached=2), EVEN)[0] == "does not pay"


def test_a_single_seed_decides_nothing():
    word, text = pays_verdict(ratio(0.5, None, None, seeds=1, reached=1), EVEN)
    assert word == "depends" and "no interval" in text and "0.50" in text


def test_a_reported_one_sided_bound():
    bound = ratio(None, None, 1.0, seeds=1, reached=1, source="reported: paper, table")
    word, text = pays_verdict(bound, EVEN)
    assert word == "pays" and "at most 1.00" in text
    assert pays_verdict(bound, BreakEven(1.1, 0.9, 1.3))[0] == "depends"


def test_no_ratio_gives_the_break_even_alone():
    word, text = pays_verdict(None, EVEN)
    assert word == "break-even only" and "1.50x" in text
