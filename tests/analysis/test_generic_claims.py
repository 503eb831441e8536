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
from analysis.claims.study import Study
from analysis.load import load_runs
from experiments.runformat import metric_keys as k
from sparsifiers import registry
from tests.helpers.claims_study import FINAL, on, scale, study_tables, write_study


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
    assert micro["accuracy"].measured == paper(study, "convergence.dense.micro").measured
    assert judged(study, "deft")["selection"].measured == paper(study, "selection.deft").measured
    (counted,) = paper(study, "traffic.count.settled.micro").measured.values()
    (union,) = micro["buildup"].measured.values()
    assert union["worst |U|/k"] == max(v for key, v in counted.items() if key.startswith("|U|/k@"))
    # The threshold baseline drifts (its paper claim holds): the generic density verdict fails.
    assert paper(study, "density.threshold").outcome is Outcome.HOLDS
    assert judged(study, "threshold")["density"].outcome is Outcome.DOES_NOT_HOLD
    # Top-k's selections are all k: no imbalance, balanced against MiCRO.
    assert judged(study, "topk")["balance"].outcome is Outcome.HOLDS


def test_a_method_two_points_below_dense_fails_the_accuracy_property(synthetic):
    root, _ = synthetic
    broken = Study.of(study_tables(root, on("micro", scale(k.ACCURACY, (FINAL["micro"] - 0.02) / FINAL["micro"],
                                                             lambda rows: [r for r in rows if r[k.ROW_KIND] == k.KIND_EVAL]))))
    verdict = judged(broken, "micro")["accuracy"]
    assert verdict.outcome is Outcome.DOES_NOT_HOLD
    assert [numbers["gap"] for numbers in verdict.measured.values()] == pytest.approx([0.022] * 2)


def test_the_criteria_at_their_edges():
    assert no_buildup({"worst |U|/k": 1.1}) and not no_buildup({"worst |U|/k": 1.1 + 1e-9})
    assert traffic_within({"worst k_max/k": 1.25}) and not traffic_within({"worst k_max/k": 1.2500001})
    assert balanced({"imbalance": 0.3, "MiCRO": 0.3}) and not balanced({"imbalance": 0.31, "MiCRO": 0.3})
    for criterion, key in ((no_buildup, "worst |U|/k"), (traffic_within, "worst k_max/k")):
        assert not criterion({key: math.nan})
    assert not balanced({"imbalance": math.nan, "MiCRO": 0.3})
