"""Steps to the target over seeds (experiments/studies/endtoend/uncertainty.py): the Student-t interval of
the mean by hand, a seed that never reached the target opening the interval above, and a pick
named only when its interval separates from every other method's."""
from __future__ import annotations

import pytest

from experiments.studies.endtoend.model import Point, pick
from experiments.studies.endtoend.report import network_table, pick_cell
from experiments.studies.endtoend.robustness import _winner
from experiments.studies.endtoend.uncertainty import TIE, Steps

T_975_2 = 4.302652729911275  # Student's t, 97.5th percentile, 2 degrees of freedom


def test_the_interval_is_the_student_t_95_percent_interval_of_the_mean_steps():
    steps = Steps((100, 110, 120), (100, 110, 120))
    half = T_975_2 * 10 / 3**0.5
    assert steps.mean == 110
    assert steps.interval == pytest.approx((110 - half, 110 + half))
    assert Steps.single(80).interval == (80, 80)  # one seed: no spread to estimate
    assert Steps((5, 50, 95), (5, 50, 95)).interval[0] == 0  # never below no steps at all


def test_a_seed_that_never_reached_the_target_opens_the_interval_above_and_leaves_no_mean():
    """It needed more than the 390 steps its run evaluated: the lower end counts it at 390."""
    steps = Steps((300, None, 320), (300, 390, 320), (0, 1, 2))
    assert steps.mean is None
    low, high = steps.interval
    values = (300, 390, 320)
    mean = sum(values) / 3
    spread = (sum((v - mean) ** 2 for v in values) / 2) ** 0.5
    assert high is None and low == pytest.approx(mean - T_975_2 * spread / 3**0.5)
    assert steps.describe() == "300, never (>390), 320"


def _point(method: str, steps: Steps, step_ms: float = 10.0) -> Point:
    return Point(method, 64, "net", step_ms, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, steps.mean, True, steps.interval)


def test_overlapping_intervals_are_a_tie_within_noise_and_separated_ones_name_the_pick():
    """topk (100-120 steps) against dense (110-130) at the same step: their intervals overlap, a
    tie; against dense_bf16 (200-220) topk's interval lies wholly below: topk is the pick."""
    topk = _point("topk", Steps((100, 110, 120), (100, 110, 120)))
    dense = _point("dense", Steps((110, 120, 130), (110, 120, 130)))
    slow = _point("dense_bf16", Steps((200, 210, 220), (200, 210, 220)))
    fastest, tied = pick([dense, topk, slow])
    assert fastest is topk and tied == [dense]
    assert pick_cell([dense, topk, slow]) == f"{TIE}: topk, dense"
    assert _winner([dense, topk, slow]) == TIE  # the robustness check reads the same cell
    assert pick_cell([topk, slow]) == "topk (1.1 s (0.852-1.35))"
    assert _winner([topk, slow]) == "topk"


def test_a_method_open_above_is_never_the_pick_but_can_tie_with_it():
    """micro never reached the target on one seed: not the pick, even were its other seeds
    fastest; its interval (open above) overlaps topk's, so topk is not named either."""
    topk = _point("topk", Steps((100, 110, 120), (100, 110, 120)))
    micro = _point("micro", Steps((60, None, 70), (60, 390, 70)))
    assert micro.time_to_target_s is None and micro.time_interval_s[1] is None
    assert pick_cell([micro, topk]) == f"{TIE}: topk, micro"
    far = _point("micro", Steps((500, None, 520), (500, 600, 520)))  # lower end 409: above topk's 135
    assert pick_cell([far, topk]).startswith("topk")


def test_the_speedup_cells_show_their_range_over_both_intervals():
    dense = _point("dense", Steps((100, 110, 120), (100, 110, 120)), step_ms=20.0)
    topk = _point("topk", Steps((100, 110, 120), (100, 110, 120)))
    (row,) = network_table({"net": {64: [dense, topk]}}, "net")[2:]
    low, high = Steps((100, 110, 120), (100, 110, 120)).interval
    assert row == f"| 64 | dense 2.2 s ({2 * low / 100:.3g}-{2 * high / 100:.3g}) | 2.00x ({2 * low / high:.2f}-{2 * high / low:.2f}) |"
