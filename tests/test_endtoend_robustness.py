"""The robustness of a pick (experiments/studies/endtoend/robustness.py): each pick modelled again with one
input at each end of its range; a pick that a move changes names that move and the new winner."""
from __future__ import annotations

import types

import pytest

from experiments.engine.core.network import NetworkModel
from experiments.engine.core.ledger import Collective
from experiments.studies.endtoend.compute import ComputeProfile, StepWork
from experiments.studies.endtoend.extrapolate import fit_statistics
from experiments.studies.endtoend.model import Method, Study
from experiments.studies.endtoend.report import robustness_table, study_markdown
from experiments.studies.endtoend.robustness import PERTURBATIONS, robustness, verdict
from experiments.studies.endtoend.uncertainty import Steps

NETWORK = NetworkModel("flat", latency_us=10.0, bandwidth_gbit=10.0)  # one GPU per node: alpha-beta exactly
STEPS = 100


def _method(name: str, elements: int) -> Method:
    """A method whose step exchanges one all-reduce of `elements` float32 at every W."""
    stats = fit_statistics([2, 4], [100.0, 190.0], [50.0, 50.0], [40.0, 40.0], numel=10**6, split=False)
    template = types.SimpleNamespace(template=(Collective("all_reduce", elements, 4),), exchange="dense",
                                     template_union=elements, template_k_max=elements)
    return Method(name, None, template, stats, Steps.single(STEPS), False)


def _study(deft_select_ms: float) -> Study:
    work = StepWork("cnn", 32, flops=1e9, kernels=100, forward_s=0.01, backward_s=0.02, ready_s=(0.0,), sizes=(10**6,))
    methods = {"dense": _method("dense", 10**6), "deft": _method("deft", 1000)}
    return Study("toy", "eval/accuracy", 0.5, work, 30.0, ComputeProfile.load("v100"), methods,
                 compute_override=10.0, select_override={"dense": 0.0, "deft": deft_select_ms})


def _step_ms(elements: int, workers: int, latency_us: float = 10.0, gbit: float = 10.0) -> float:
    """The ring all-reduce by hand: 2 (W-1) (alpha + n / (W beta)), n in bytes."""
    return 2 * (workers - 1) * (latency_us * 1e-6 + 4 * elements / workers / (gbit * 1e9 / 8)) * 1e3


def test_the_model_prices_the_toy_steps_as_by_hand():
    study = _study(1.0)
    dense = study.point(study.methods["dense"], 4, NETWORK)
    assert dense.exchange_ms == pytest.approx(_step_ms(10**6, 4)) and dense.compute_ms == 10.0


def test_a_pick_far_ahead_is_robust():
    """DEFT's 1 ms selection and 4 KB exchange against dense's 4 MB: no move changes the pick."""
    verdicts = robustness(_study(1.0), [NETWORK], [4, 16])
    assert verdicts == {"flat": {"4": "robust", "16": "robust"}}


def test_a_pick_a_selection_move_overturns_names_it_and_the_new_winner():
    """DEFT ahead of dense at W = 4 by 10% of its selection time: +50% selection hands the pick to
    dense; nothing else moves it that far (alpha and beta move both, compute both alike)."""
    gap = _step_ms(10**6, 4) - _step_ms(1000, 4)  # what DEFT saves on the exchange
    select_ms = gap / 1.1  # DEFT wins by 10% of its selection
    verdicts = robustness(_study(select_ms), [NETWORK], [4])
    assert verdicts["flat"]["4"] == "depends on selection +50%: dense"


def test_verdict_lists_every_move_that_changes_the_pick():
    winners = {p.label: "deft" for p in PERTURBATIONS} | {"alpha x2": "dense", "compute +30%": None}
    assert verdict("deft", winners) == "depends on alpha x2: dense; compute +30%: none reaches"
    assert verdict("deft", {p.label: "deft" for p in PERTURBATIONS}) == "robust"
    assert len(PERTURBATIONS) == 8


def test_the_tables_show_each_picks_verdict():
    study = _study(1.0)
    grid = {"flat": {w: [study.point(m, w, NETWORK) for m in study.methods.values()] for w in (4, 16)}}
    verdicts = {"flat": {"4": "robust", "16": "depends on alpha x2: dense"}}
    assert robustness_table(grid, verdicts) == ["| W | flat |", "|---|---|", "| 4 | robust |",
                                                 "| 16 | depends on alpha x2: dense |"]
    text = study_markdown("toy", "Target", [], grid, verdicts)
    assert "### How robust each pick is" in text and "| 16 | depends on alpha x2: dense |" in text
    assert "### How robust" not in study_markdown("toy", "Target", [], grid)
