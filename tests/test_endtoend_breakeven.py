"""The per-step factor and the break-even (experiments/studies/endtoend/breakeven.py): one cell priced by
hand, term by term, and each of the eight moves of its range priced by hand too; the page shows them."""
from __future__ import annotations

import sys
import types

import pytest

from experiments.engine.core.ledger import Collective
from experiments.engine.core.network import NetworkModel
from experiments.studies.endtoend import breakeven, report, verdicts
from experiments.studies.endtoend.compute import ComputeProfile, StepWork
from experiments.studies.endtoend.extrapolate import fit_statistics
from experiments.studies.endtoend.model import Method, Study
from experiments.studies.endtoend.robustness import PERTURBATIONS
from experiments.studies.endtoend.steps_ratio import StepsRatio
from experiments.studies.endtoend.verdict import describe_ratio

# one GPU per node: the flat alpha-beta ring exactly; efficiency 0.8 so that both efficiency moves move it
NETWORK = NetworkModel("flat", latency_us=10.0, bandwidth_gbit=10.0, efficiency=0.8)
COMPUTE_MS, DEFT_SELECT_MS, W = 10.0, 2.0, 8
DENSE_N, DEFT_N = 10**6, 1000  # float32 elements each all-reduces


def _method(name: str, elements: int) -> Method:
    """A method whose step exchanges one all-reduce of `elements` float32 at every W."""
    stats = fit_statistics([2, 4], [100.0, 190.0], [50.0, 50.0], [40.0, 40.0], numel=10**6, split=False)
    template = types.SimpleNamespace(template=(Collective("all_reduce", elements, 4),), exchange="dense",
                                     template_union=elements, template_k_max=elements)
    return Method(name, None, template, stats, False)


def _study() -> Study:
    work = StepWork("cnn", 32, flops=1e9, kernels=100, forward_s=0.01, backward_s=0.02, ready_s=(0.0,), sizes=(10**6,))
    methods = {"dense": _method("dense", DENSE_N), "deft": _method("deft", DEFT_N)}
    return Study("toy", work, 30.0, ComputeProfile.load("v100"), methods,
                 compute_override=COMPUTE_MS, select_override={"dense": 0.0, "deft": DEFT_SELECT_MS})


def _ring_ms(elements: int, alpha_us: float = 10.0, efficiency: float = 0.8) -> float:
    """The ring all-reduce by hand: 2 (W-1) (alpha + n / (W beta)), n in bytes, beta = 10 Gbit/s x efficiency."""
    return 2 * (W - 1) * (alpha_us * 1e-6 + 4 * elements / W / (10e9 * efficiency / 8)) * 1e3


def _speedup(compute=1.0, select=1.0, alpha_us=10.0, efficiency=0.8) -> float:
    dense = COMPUTE_MS * compute + _ring_ms(DENSE_N, alpha_us, efficiency)
    deft = COMPUTE_MS * compute + DEFT_SELECT_MS * select + _ring_ms(DEFT_N, alpha_us, efficiency)
    return dense / deft


HAND = {"alpha x0.5": _speedup(alpha_us=5.0), "alpha x2": _speedup(alpha_us=20.0),
        "beta efficiency 0.7": _speedup(efficiency=0.7), "beta efficiency 1": _speedup(efficiency=1.0),
        "compute -30%": _speedup(compute=0.7), "compute +30%": _speedup(compute=1.3),
        "selection -50%": _speedup(select=0.5), "selection +50%": _speedup(select=1.5)}


def test_one_cell_priced_by_hand_compute_selection_and_every_collective():
    (cell,) = breakeven.cells(_study(), NETWORK, W)
    dense_ms = COMPUTE_MS + _ring_ms(DENSE_N)
    deft_ms = COMPUTE_MS + DEFT_SELECT_MS + _ring_ms(DEFT_N)
    assert (cell.method, cell.baseline) == ("deft", "dense")
    assert cell.baseline_step_ms == pytest.approx(dense_ms, rel=1e-12) and cell.step_ms == pytest.approx(deft_ms, rel=1e-12)
    assert cell.speedup == pytest.approx(dense_ms / deft_ms, rel=1e-12) and cell.pays_per_step


@pytest.mark.parametrize("label", list(HAND))
def test_each_move_of_the_range_is_priced_by_hand_and_moves_the_speedup(label):
    """A move that changed nothing, or moved the wrong input, fails here: each hand price moves
    only its own input, and every one differs from the nominal speedup."""
    (cell,) = breakeven.cells(_study(), NETWORK, W)
    assert [p.label for p in PERTURBATIONS] == list(HAND)
    assert cell.moves[label] == pytest.approx(HAND[label], rel=1e-12)
    assert cell.moves[label] != pytest.approx(cell.speedup, rel=1e-6)


def test_the_range_is_the_lowest_and_highest_of_the_nominal_and_the_eight():
    (cell,) = breakeven.cells(_study(), NETWORK, W)
    values = [cell.speedup, *HAND.values()]
    assert (cell.low, cell.high) == (pytest.approx(min(values), rel=1e-12), pytest.approx(max(values), rel=1e-12))
    # a faster link (efficiency 1) shrinks what DEFT saves; a slower one (0.7) grows it
    assert cell.low == pytest.approx(HAND["beta efficiency 1"], rel=1e-12) and cell.low < cell.speedup < cell.high


def test_the_best_dense_baseline_is_the_shortest_dense_step():
    """dense_bf16 sends half of dense's bytes: it is the baseline (on a GPU with bf16)."""
    study = _study()
    study.profile = ComputeProfile.load("h200")
    study.methods["dense_bf16"] = _method("dense_bf16", DENSE_N // 2)
    study.select_override["dense_bf16"] = 0.0
    (cell,) = breakeven.cells(study, NETWORK, W)
    dense = COMPUTE_MS + _ring_ms(DENSE_N // 2)
    assert cell.baseline == "dense_bf16" and cell.speedup == pytest.approx(dense / cell.step_ms, rel=1e-12)


@pytest.mark.parametrize("interval, word", [((1.05, 1.15), "pays"), ((0.95, 1.35), "depends"), ((1.6, 1.8), "does not pay")])
def test_the_page_shows_the_hand_priced_speedup_break_even_and_verdict(interval, word):
    """The hand-priced cell's range (its lowest and highest move, by hand) against a ratio below it,
    across it and above it: the verdict rule's three words, on the page."""
    grid = breakeven.grid(_study(), [NETWORK], [W])
    low, high = min(HAND.values()), max(HAND.values())
    assert 1.15 < low < 1.35 < high < 1.6  # the three ratios lie below, across and above the range
    ratio = StepsRatio("deft", "toy", sum(interval) / 2, *interval, seeds=3, reached=3,
                       source="laptop convergence sweep", note="target 0.8 (dense's final 0.805 less 0.005)")
    found = verdicts.verdicts(grid, [ratio])
    text = f"{describe_ratio(ratio)} against break-even {_speedup():.2f}x ({low:.2f}-{high:.2f})"
    assert found == [{"method": "deft", "network": "flat", "workers": W, "source": ratio.source, "workload": "toy",
                      "word": word, "text": text}]
    study = {"title": "toy", "sources": ["compute: given"], "ratios": [verdicts.ratio_json(ratio)], "verdicts": found}
    page = report.study_markdown(study, grid)
    hand = _speedup()
    assert f"| {W} | dense {COMPUTE_MS + _ring_ms(DENSE_N):.3g} ms | {hand:.2f}x ({min(HAND.values()):.2f}-{max(HAND.values()):.2f})* |" in page
    mean = sum(interval) / 2
    assert f"| deft | {mean:.2f} ({interval[0]:.2f}-{interval[1]:.2f}), 3 seeds | laptop convergence sweep (toy) | {word} |" in page
    assert "- laptop convergence sweep: target 0.8 (dense's final 0.805 less 0.005)" in page


def test_without_a_known_ratio_the_break_even_is_the_answer():
    grid = breakeven.grid(_study(), [NETWORK], [W])
    page = report.study_markdown({"title": "toy", "sources": [], "ratios": [], "verdicts": []}, grid)
    assert "No steps ratio known: the break-even is the answer" in page


def test_a_union_exchange_cell_priced_by_hand_collective_by_collective():
    """DEFT's shape of step at a hosted W = 4: its unit norms all-reduced, its plan broadcast, the
    padded index all-gather of k_max and the value all-reduce of |U| (the hosted runs' 50 and 190),
    each priced by hand on the flat ring at efficiency 0.8, against dense's one all-reduce."""
    stats = fit_statistics([2, 4], [100.0, 190.0], [50.0, 50.0], [40.0, 40.0], numel=10**6, split=False)
    ledger = (Collective("all_reduce", 64, 4), Collective("broadcast", 10, 4, root=0),
              Collective("all_gather", 50, 4), Collective("all_reduce", 190, 4))
    template = types.SimpleNamespace(template=ledger, exchange="union_allreduce", template_union=190, template_k_max=50)
    study = _study()
    study.methods["deft"] = Method("deft", None, template, stats, False)
    workers, alpha, beta = 4, 10e-6, 10e9 * 0.8 / 8  # s, bytes/s
    by_hand_s = (2 * (workers - 1) * (alpha + 64 * 4 / (workers * beta))  # ring all-reduce of the norms
                 + 2 * (alpha + 10 * 4 / beta)  # binomial-tree broadcast of the plan: ceil(log2 4) rounds
                 + (workers - 1) * (alpha + 50 * 4 / beta)  # ring all-gather of k_max indices a rank
                 + 2 * (workers - 1) * (alpha + 190 * 4 / (workers * beta)))  # ring all-reduce of |U| values
    dense_ms = COMPUTE_MS + 2 * (workers - 1) * (alpha + DENSE_N * 4 / (workers * beta)) * 1e3
    (cell,) = breakeven.cells(study, NETWORK, workers)
    assert cell.step_ms == pytest.approx(COMPUTE_MS + DEFT_SELECT_MS + by_hand_s * 1e3, rel=1e-12) and cell.hosted
    assert cell.speedup == pytest.approx(dense_ms / (COMPUTE_MS + DEFT_SELECT_MS + by_hand_s * 1e3), rel=1e-12)
