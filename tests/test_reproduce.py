"""`make reproduce`: the laptop studies' command lines are valid jobs, and the cut-down run
(`--quick`) goes through every stage for real: `python run.py -m` sweeps on the bundled digits,
the selection study, the claims judged on all of it, claims.md with a row per claim and the
figures it links."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from analysis import measured
from analysis.claims import CLAIMS
from experiments.engine.launcher.compose import compose_job, preflight
from experiments.studies.reproduce.__main__ import publish_claims
from experiments.studies.reproduce.studies import SWEEPS
from tests.conftest import REPO

# Jobs per sweep of the full study: 6 methods x W = 2, 4, 8, 16; MiCRO and ExDyna again from a calibrated
# start; threshold and SAGE at 16; Top-k and Ok-Topk at 32 and 64; Ok-Topk's paper variant at 2, 4, 16
# and 64; dense, Top-k, CLT-k, DEFT, MiCRO, ExDyna; DGC.
FULL_JOBS = {"statistics": 24, "calibrated start, micro": 4, "calibrated start, exdyna": 4, "drifting thresholds": 2, "wide build-up": 4,
             "Ok-Topk, paper variant": 4, "convergence": 6, "DGC": 1}


@pytest.mark.parametrize("sweep", SWEEPS, ids=lambda sweep: sweep.name)
def test_every_sweep_of_the_full_study_composes_and_validates(sweep, tmp_path):
    """Each of make reproduce's command lines passes run.py's own pre-flight (every job composed
    and validated, and where it will be written checked, as before a launch), with the number of
    jobs the study means."""
    assert preflight(["-m", *sweep.args, f"hydra.sweep.dir={tmp_path}"]) == FULL_JOBS[sweep.name]
    # Hydra's basic sweeper first composes the config without the comma lists: that must work too
    # (a knob of one swept sparsifier fails it when the default sparsifier lacks the knob).
    compose_job([arg for arg in sweep.args if "," not in arg.split("=", 1)[-1] or arg.startswith("hydra.")])


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("reproduce")
    env = {**os.environ, "WANDB_MODE": "disabled"}
    result = subprocess.run([sys.executable, "-m", "experiments.studies.reproduce", "--quick", "--out", str(out)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    verdicts = {claim["id"]: claim for claim in json.loads((out / "claims.json").read_text())["claims"]}
    return out, result.stdout, verdicts


@pytest.mark.slow
def test_quick_reproduce_judges_every_claim(quick):
    out, stdout, verdicts = quick
    assert list(verdicts) == [claim.id for claim in CLAIMS]
    assert all(v["verdict"] in ("HOLDS", "DOES_NOT_HOLD", "NOT_MEASURABLE") for v in verdicts.values())
    # Per-step invariants of real runs: disjoint selections, and Top-k's union growing from W = 2 to 4.
    assert verdicts["buildup.micro"]["verdict"] == "HOLDS"
    assert verdicts["buildup.topk"]["verdict"] == "HOLDS"
    # 16 steps never settle: said, not judged.
    assert verdicts["density.micro"]["verdict"] == "NOT_MEASURABLE" and "settled" in verdicts["density.micro"]["reason"]
    # The scoped claims judge their own studies' runs, and say so.
    for claim_id, tag in (("selection.micro", "laptop/selection_replay"), ("convergence.dense.micro", "laptop/convergence"),
                         ("buildup.micro", "laptop/statistics")):
        assert verdicts[claim_id]["verdict"] != "NOT_MEASURABLE", verdicts[claim_id]["reason"]
        assert verdicts[claim_id]["scope"].endswith(f"tagged {tag}")
    # Progress: a line per sweep and per finished run, and the table at the end.
    assert "[1/3] statistics" in stdout and "run 4/4 done" in stdout
    for claim in CLAIMS:
        assert re.search(rf"^(HOLDS|DOES_NOT_HOLD|NOT_MEASURABLE)\s+{re.escape(claim.id)}\s", stdout, re.M), claim.id


@pytest.mark.slow
def test_quick_reproduce_writes_claims_md_with_its_figures(quick):
    out, _, _ = quick
    text = (out / "claims.md").read_text()
    summary, every = text.split("## Summary", 1)[1].split("## Every claim", 1)
    assert len([line for line in summary.splitlines() if line.startswith("| `")]) == len(CLAIMS)
    assert len([line for line in every.splitlines() if line.startswith("| `")]) == len(CLAIMS)
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert figures and all((out / figure).is_file() for figure in figures)
    assert any("selection" in figure for figure in figures)  # the selection study drew its figure too


@pytest.mark.slow
def test_quick_reproduce_publishes_the_summary_of_claims_md(quick, tmp_path):
    """--publish's page (docs/measured/claims.md) shows claims.md's summary, rendered from claims.json."""
    out, _, _ = quick
    page = publish_claims(out / "claims.json", out, 75.0, pages=tmp_path)
    rows = [line for line in page.read_text().splitlines() if line.startswith("| `")]
    summary = (out / "claims.md").read_text().split("## Summary", 1)[1].split("## Every claim", 1)[0]
    assert len(rows) == len(CLAIMS) and all(row in summary for row in rows)
    assert measured.check(tmp_path) == []
    record = json.loads((tmp_path / "claims.json").read_text())
    assert record["provenance"]["runs"] > 0 and record["provenance"]["wall_seconds"] == 75


def test_a_busy_machine_is_said_before_the_timings_are_measured(monkeypatch):
    """The selection-cost and time-to-target claims time the machine: a load already there is said."""
    from experiments.studies.reproduce import __main__ as reproduce
    from experiments.studies.reproduce import sweeps
    monkeypatch.setattr(sweeps.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(sweeps.os, "getloadavg", lambda: (0.3, 0.3, 0.3))
    assert sweeps.busy_warning(reproduce.TIMED) is None
    monkeypatch.setattr(sweeps.os, "getloadavg", lambda: (3.8, 3.0, 2.0))
    warning = sweeps.busy_warning(reproduce.TIMED)
    assert "load average 3.8 on 2 cores" in warning and "selection-cost" in warning
