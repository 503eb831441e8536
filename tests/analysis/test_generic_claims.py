"""The generic verdicts (analysis/claims/generic.py) on the synthetic all-hold study of the
claims (tests/helpers/claims_study.py): every registered method gets every property, none
dropped; each property reads the numbers of the paper claim it generalises; the criteria at their
edges."""
from __future__ import annotations

import math

import pytest

from analysis.claims import BY_ID, judge_study
from analysis.claims.claim import Outcome
from analysis.claims.generic import PROPERTIES, balanced, claims_for, no_buildup, traffic_within
from analysis import scorecard
from analysis.claims.output import number
from analysis.claims.pays import PerStep, break_even, pays_somewhere
from analysis.claims.study import Study
from analysis.load import load_runs
from experiments.runformat import metric_keys as k
from sparsifiers import registry
from analysis.synthetic import SyntheticRun, write_run
from tests.helpers.claims_study import DENSITY, EPOCHS, FINAL, ROWS, _base_rows, _text, on, scale, study_tables, write_study


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    root = write_study(tmp_path_factory.mktemp("generic"))
    return root, Study.of(load_runs([root], cache=False))


def judged(study: Study, method: str) -> dict:
    return {verdict.claim.id.split(".")[1]: verdict for verdict in judge_study(study, claims_for(method))}


def test_every_method_gets_every_property_and_a_reason_where_it_has_none(synthetic):
    _, study = synthetic
    for method in registry.names():
        verdicts = judged(study, method)
        assert list(verdicts) == list(PROPERTIES), method
        for prop, verdict in verdicts.items():
            assert verdict.outcome is not Outcome.NOT_MEASURABLE or verdict.reason, (method, prop)
        if not registry.method(method).selects:
            for prop in ("selection", "buildup", "density", "traffic", "balance"):
                assert verdicts[prop].reason.startswith("not applicable, because"), (method, prop)
    assert judged(study, "dense")["accuracy"].reason == "not applicable, because dense is the baseline the others are held to"
    assert judged(study, "micro")["balance"].reason.startswith("not applicable, because MiCRO's fixed partitions")
    # A method the study holds no runs of is said, not dropped.
    assert judged(study, "randomk")["density"].reason == "no finished Random-k runs"


def paper(study: Study, claim_id: str):
    return judge_study(study, [BY_ID[claim_id]])[0]


def test_each_property_reads_the_numbers_of_the_paper_claim_it_generalises(synthetic):
    _, study = synthetic
    micro = judged(study, "micro")
    assert micro["density"].measured == paper(study, "density.micro").measured
    # the paper claim's numbers, and beside them the paired seeds' mean and interval (one seed: none)
    for label, numbers in paper(study, "convergence.dense.micro").measured.items():
        assert {key: micro["accuracy"].measured[label][key] for key in numbers} == numbers
        assert micro["accuracy"].measured[label]["seeds"] == 1 and math.isnan(micro["accuracy"].measured[label]["gap low"])
    assert judged(study, "deft")["selection"].measured == paper(study, "selection.deft").measured
    (counted,) = paper(study, "traffic.count.settled.micro").measured.values()
    (union,) = micro["buildup"].measured.values()
    assert union["worst |U|/k"] == max(v for key, v in counted.items() if key.startswith("|U|/k@"))
    # The threshold baseline drifts (its paper claim holds): the generic density verdict fails.
    assert paper(study, "density.threshold").outcome is Outcome.HOLDS
    assert judged(study, "threshold")["density"].outcome is Outcome.DOES_NOT_HOLD
    # Top-k's selections are all k: no imbalance, balanced against MiCRO; but their union builds up
    # with W (1.5 k at W = 2, 2.5 k at W = 4), so build-up and the settled density fail.
    topk = judged(study, "topk")
    assert topk["balance"].outcome is Outcome.HOLDS
    assert topk["buildup"].outcome is topk["density"].outcome is Outcome.DOES_NOT_HOLD
    assert [numbers["worst |U|/k"] for numbers in topk["buildup"].measured.values()] == [2.5]


def test_a_method_two_points_below_dense_fails_the_accuracy_property(synthetic):
    root, _ = synthetic
    broken = Study.of(study_tables(root, on("micro", scale(k.ACCURACY, (FINAL["micro"] - 0.02) / FINAL["micro"],
                                                             lambda rows: [r for r in rows if r[k.ROW_KIND] == k.KIND_EVAL]))))
    verdict = judged(broken, "micro")["accuracy"]
    assert verdict.outcome is Outcome.DOES_NOT_HOLD
    assert [numbers["gap"] for numbers in verdict.measured.values()] == pytest.approx([0.022] * 2)


# t(0.975, 2): the two-sided 95% Student-t quantile for three seeds, from a printed table
T_TWO_DOF = 4.302652729911275


def test_the_accuracy_gap_has_a_95_percent_t_interval_over_paired_seeds(tmp_path):
    """Three seeds of dense and MiCRO at W = 4, MiCRO's finals 0.5, 1 and 0.5 points below dense's
    of the same seed: the mean gap and its interval, mean +- t s / sqrt(3), by hand."""
    finals = {"dense": (0.90, 0.91, 0.92), "micro": (0.895, 0.900, 0.915)}
    for method, values in finals.items():
        for seed, final in enumerate(values):
            records = [dict(row) for row in _base_rows(method, 4)]
            for row in records:
                if row[k.ROW_KIND] == k.KIND_EVAL:
                    row[k.ACCURACY] = row[k.ACCURACY] / FINAL[method] * final
            write_run(tmp_path / f"{method}_s{seed}", SyntheticRun(method=method, workers=4, seed=seed, density=DENSITY,
                                                                   steps=ROWS, epochs=EPOCHS), metrics=_text(method, 4, ROWS, records))
    study = Study.of(load_runs([tmp_path], cache=False))
    verdict = judged(study, "micro")["accuracy"]
    (numbers,) = verdict.measured.values()
    gaps = [0.005, 0.010, 0.005]
    mean = sum(gaps) / 3
    spread = math.sqrt(sum((g - mean) ** 2 for g in gaps) / 2)
    half = T_TWO_DOF * spread / math.sqrt(3)
    assert numbers["seeds"] == 3 and numbers["paired gap"] == pytest.approx(mean) == pytest.approx(numbers["gap"])
    assert (numbers["gap low"], numbers["gap high"]) == (pytest.approx(mean - half), pytest.approx(mean + half))
    assert verdict.outcome is Outcome.HOLDS  # the criterion is still the mean gap's
    # the scorecard shows the interval beside the measure
    record = scorecard.records(scorecard.field(study, ["dense", "micro"]))["micro"]
    assert record["measures"]["accuracy"]["interval"] == {"low": pytest.approx(mean - half), "high": pytest.approx(mean + half),
                                                          "seeds": 3.0}
    shown = scorecard.value_text(record["measures"]["accuracy"])
    assert shown.startswith(f"{number(numbers['gap'])} (95%: {number(mean - half)} to ") and shown.endswith(", 3 seeds)")
    assert shown in scorecard.page(record)


def test_the_criteria_at_their_edges():
    assert no_buildup({"worst |U|/k": 1.1}) and not no_buildup({"worst |U|/k": 1.1 + 1e-9})
    assert traffic_within({"worst k_max/k": 1.25}) and not traffic_within({"worst k_max/k": 1.2500001})
    assert balanced({"imbalance": 0.3, "MiCRO": 0.3}) and not balanced({"imbalance": 0.31, "MiCRO": 0.3})
    for criterion, key in ((no_buildup, "worst |U|/k"), (traffic_within, "worst k_max/k")):
        assert not criterion({key: math.nan})
    assert not balanced({"imbalance": math.nan, "MiCRO": 0.3})


def test_pays_somewhere_reads_the_highest_lower_end_of_the_break_even(synthetic):
    """The cells of the end-to-end model (as experiments/studies/compare/pays.py hands them over):
    the property holds where some cell's whole range lies above 1, its lower end > 1."""
    _, study = synthetic
    cells = [{"network": "a", "workers": 4, "speedup": 1.3, "low": 0.9, "high": 1.6},
             {"network": "b", "workers": 64, "speedup": 1.2, "low": 1.05, "high": 1.4},
             {"network": "b", "workers": 128, "speedup": 0.8, "low": 0.6, "high": 0.9}]
    per_step = PerStep("toy", ("a", "b"), {"topk": cells}, "no toy runs")
    (numbers,) = break_even(per_step, "topk").subjects.values()
    assert numbers == {"best low": 1.05, "break-even": 1.2, "W": 64.0, "best low@a": 0.9, "best low@b": 1.05,
                       "cells paying": 1.0, "cells": 3.0}
    assert judge_study(study, claims_for("topk", per_step))[-1].outcome is Outcome.HOLDS
    below = PerStep("toy", ("a", "b"), {"topk": [dict(cell, low=min(cell["low"], 1.0)) for cell in cells]})
    assert judge_study(study, claims_for("topk", below))[-1].outcome is Outcome.DOES_NOT_HOLD
    # a method without cells says why; a dense baseline is the speedup's reference; nothing modelled
    assert judge_study(study, claims_for("deft", per_step))[-1].reason == "DEFT: no toy runs"
    assert judged(study, "powersgd")["pays"].reason.startswith("not applicable, because PowerSGD")
    assert judged(study, "topk")["pays"].outcome is Outcome.NOT_MEASURABLE
    assert pays_somewhere({"best low": 1.0 + 1e-9}) and not pays_somewhere({"best low": 1.0})
    assert not pays_somewhere({"best low": math.nan})
