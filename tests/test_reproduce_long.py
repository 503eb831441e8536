"""`make reproduce LONG=1`: the long study's command lines compose to the long runs they mean, a
stopped study started again redoes only its unfinished runs (and judges the same claims), and the
side-by-side page of the two studies' verdicts is generated from their claims records."""
from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis import compare_claims, measured
from analysis.claims import judge_paths
from experiments.engine.launcher.compose import compose_job, preflight
from experiments.studies.reproduce.studies import (LONG_EPOCHS, LONG_MILESTONE, LONG_STATISTICS_STEPS, LONG_SWEEPS,
                                                   QUICK_LONG_SWEEPS, SWEEPS)
from experiments.studies.reproduce.sweeps import ENV, STATUS, planned_jobs, run_sweep, started
from tests.conftest import REPO

# The long study's jobs per sweep (the 30-minute study's grids; wide Ok-Topk split from wide build-up).
LONG_JOBS = {"statistics": 24, "calibrated start, micro": 4, "calibrated start, exdyna": 4, "drifting thresholds": 2,
             "wide build-up": 2, "wide build-up, Ok-Topk": 2, "Ok-Topk, paper variant": 4, "convergence": 6, "DGC": 1}


@pytest.mark.parametrize("sweep", LONG_SWEEPS, ids=lambda sweep: sweep.name)
def test_every_sweep_of_the_long_study_composes_to_long_runs(sweep, tmp_path):
    """Each long command line passes run.py's pre-flight with the jobs the study means, keeps the
    laptop study's tag (the claims judge runs by tag), and composes to the long length."""
    assert preflight(["-m", *sweep.args, f"hydra.sweep.dir={tmp_path}"]) == LONG_JOBS[sweep.name]
    cfg = compose_job([arg for arg in sweep.args if "," not in arg.split("=", 1)[-1] or arg.startswith("hydra.")])
    if sweep.folder == "statistics":
        assert cfg.tag == "laptop/statistics"
        okt = "oktopk" in " ".join(sweep.args)  # Ok-Topk's runs keep the laptop's 600 steps (studies.py)
        assert cfg.max_steps == (600 if okt else LONG_STATISTICS_STEPS)
        assert cfg.max_steps < cfg.epochs * 60000 / (cfg.batch_size * 64)  # max_steps ends every run, W = 64 too
    else:
        assert cfg.tag == "laptop/convergence"
        assert cfg.epochs == LONG_EPOCHS and "max_steps" not in sweep.args
        assert cfg.schedule.name == "step" and list(cfg.schedule.milestones) == [LONG_MILESTONE]
        assert LONG_MILESTONE / LONG_EPOCHS == 0.75  # the papers' decay at 75% of training


def test_the_long_study_covers_every_sweep_of_the_30_minute_one():
    """Same claims served: every 30-minute grid is in the long study (method, W, start, variant)."""
    def grid(sweeps):
        return sorted(" ".join(sorted(a for a in s.args if not a.startswith(("max_steps=", "epochs=", "schedule"))))
                      for s in sweeps)
    short = grid(SWEEPS)
    long = grid(LONG_SWEEPS)
    wide = "experiment=laptop/statistics sparsifier=topk,oktopk workers=32,64"
    assert wide in short and wide not in long
    assert [g for g in short if g != wide] == [g for g in long if "workers=32,64" not in g]
    assert sorted(g for g in long if "workers=32,64" in g) == [
        "experiment=laptop/statistics sparsifier=oktopk workers=32,64",
        "experiment=laptop/statistics sparsifier=topk workers=32,64"]


def test_planned_jobs_name_the_run_directories_hydra_gives_them(tmp_path):
    """Resume finds a job's run directory by the name Hydra's sweeper gives it: the experiment's
    swept keys first, a key given on the command line keeping its place."""
    sweep = next(s for s in LONG_SWEEPS if s.name == "calibrated start, micro")
    jobs = planned_jobs(sweep, tmp_path)
    assert [name for _, name in jobs] == [f"{n}_micro_calibrated_w{w}" for n, w in enumerate((2, 4, 8, 16))]
    assert jobs[0][0][:3] == ["sparsifier=micro", "workers=2", "experiment=laptop/statistics"]


def test_a_sweep_resumes_only_where_its_own_runs_are(tmp_path):
    """The statistics folder holds several sweeps: a sweep none of whose jobs has a run there yet
    runs whole (one process, as before resume existed); one with a run there, even unfinished, resumes."""
    sweep = next(s for s in LONG_SWEEPS if s.name == "drifting thresholds")
    folder = tmp_path / "statistics"
    assert not started(sweep, folder)

    def run(name: str, overrides: list[str], status: str) -> None:
        (folder / name).mkdir(parents=True)
        (folder / name / ENV).write_text(json.dumps({"job": {"overrides": overrides}}))
        (folder / name / STATUS).write_text(json.dumps({"status": status}))

    run("0_topk_w2", ["sparsifier=topk", "workers=2", "experiment=laptop/statistics", "max_steps=3000", "epochs=200"], "done")
    assert not started(sweep, folder)  # another sweep's run
    run("0_threshold_w16", ["sparsifier=threshold", "workers=16", "experiment=laptop/statistics", "max_steps=3000",
                            "epochs=200"], "running")
    assert started(sweep, folder)


# The claims that time the machine (select ms, seconds to a target): they move with its load.
TIMED = ("selection.", "convergence.sooner.")


def _verdicts(folder: Path) -> dict[str, tuple[str, dict]]:
    """Every claim's verdict and numbers, but for those that time the machine."""
    verdicts, _ = judge_paths([folder], cache=False)
    return {v.claim.id: (v.outcome.value, v.measured) for v in verdicts if not v.claim.id.startswith(TIMED)}


@pytest.mark.slow
def test_a_stopped_study_resumes_redoing_only_its_unfinished_runs(tmp_path, capsys):
    """The quick long statistics sweep (4 runs) stopped after 2 runs (SIGTERM to the driver, as
    Ctrl-C or a lost session), started again: the finished runs are reused untouched, only the others
    run, under the names one whole sweep gives them, and the claims judged on it are those of the
    same sweep never stopped."""
    sweep = QUICK_LONG_SWEEPS[0]
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": str(REPO)}
    driver = ("import sys; from pathlib import Path; "
              "from experiments.studies.reproduce.studies import QUICK_LONG_SWEEPS; "
              "from experiments.studies.reproduce.sweeps import run_sweep, start_study; "
              "out = start_study(Path(sys.argv[1]), 'reproduce'); run_sweep(QUICK_LONG_SWEEPS[0], out, 1, 1)")
    process = subprocess.Popen([sys.executable, "-c", driver, str(stopped)], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in process.stdout:
        lines.append(line)
        if "run 2/4 done" in line:
            process.terminate()
            break
    rest = process.communicate(timeout=120)[0]
    assert process.returncode != 0, "".join(lines) + rest
    folder = stopped / sweep.folder
    finished = {status.parent.name: status.read_bytes() for status in folder.glob(f"*/{STATUS}")
                if json.loads(status.read_text())["status"] == "done"}
    assert 2 <= len(finished) < 4, "".join(lines) + rest

    capsys.readouterr()
    run_sweep(sweep, stopped, 1, 1)
    said = capsys.readouterr().out
    assert f"resuming: {len(finished)} of 4 runs already done (reused), {4 - len(finished)} to run" in said
    assert said.count(" done: ") == 4 - len(finished)  # only the unfinished ran
    for name, status in finished.items():  # reused as they were
        assert (folder / name / STATUS).read_bytes() == status

    run_sweep(sweep, whole, 1, 1)
    names = sorted(path.parent.name for path in (whole / sweep.folder).glob(f"*/{STATUS}"))
    assert sorted(path.parent.name for path in folder.glob(f"*/{STATUS}")) == names
    assert all(json.loads((folder / name / STATUS).read_text())["status"] == "done" for name in names)

    resumed, never_stopped = _verdicts(stopped), _verdicts(whole)
    assert resumed == never_stopped
    assert resumed["buildup.topk"][0] == "HOLDS"  # judged, not just equally empty

    capsys.readouterr()
    run_sweep(sweep, stopped, 1, 1)  # all done: nothing runs
    assert "resuming: 4 of 4 runs already done (reused), 0 to run" in capsys.readouterr().out


def _claim(claim_id: str, verdict: str, measured_: dict, held: dict, reason: str = "") -> dict:
    return {"id": claim_id, "wording": f"{claim_id} is true.", "source": "", "needs": "", "statistic": "",
            "criterion": "", "verdict": verdict, "reason": reason, "scope": "", "measured": measured_, "held": held}


def _record(claims: list[dict], runs: int) -> dict:
    return {"paths": ["out"], "runs_judged": runs, "runs_left_out": 0, "claims": claims}


SUBJECT = "micro(threshold_start=released) | mlp/fashion_mnist | d=0.01 | W=16"
# The long study's subjects name their run length; the 30-minute study's, at the experiment's own, do not.
LONG_SUBJECT = "micro(threshold_start=released) | mlp/fashion_mnist epochs=200 max_steps=3000 | d=0.01 | W=16"
SHORT = _record([
    _claim("buildup.topk", "HOLDS", {"topk | W=2..64": {"slope": 0.9}}, {"topk | W=2..64": True}),
    _claim("density.micro", "DOES_NOT_HOLD", {SUBJECT: {"settled": 0.2139, "from step": 300.0}}, {SUBJECT: False}),
    _claim("convergence.dense.micro", "NOT_MEASURABLE", {}, {}, reason="no finished MiCRO runs"),
], runs=89)
LONG = _record([
    _claim("buildup.topk", "HOLDS", {"topk | W=2..64": {"slope": 0.91}}, {"topk | W=2..64": True}),
    _claim("density.micro", "HOLDS", {LONG_SUBJECT: {"settled": 0.0412, "from step": 1500.0}}, {LONG_SUBJECT: True}),
    _claim("convergence.dense.micro", "DOES_NOT_HOLD", {"micro | W=4": {"gap": 0.0157}}, {"micro | W=4": False}),
], runs=81)


def test_the_side_by_side_names_each_claim_whose_verdict_differs_with_both_numbers():
    data = compare_claims.compare(SHORT, LONG)
    assert [(row["id"], row["short"], row["long"]) for row in data["rows"]] == [
        ("buildup.topk", "HOLDS", "HOLDS"), ("density.micro", "DOES_NOT_HOLD", "HOLDS"),
        ("convergence.dense.micro", "NOT_MEASURABLE", "DOES_NOT_HOLD")]
    assert "subjects" not in data["rows"][0]  # the same verdict: no numbers repeated
    text = compare_claims.page(data)
    assert "3 claims; 2 with a different verdict" in text
    assert "| `buildup.topk` | HOLDS | HOLDS |  |" in text
    assert "| `density.micro` | DOES_NOT_HOLD | HOLDS | **differs** |" in text
    # The claim that fails in 30 minutes and holds long, named with the numbers of both.
    assert "### `density.micro`: DOES_NOT_HOLD in 30 min, HOLDS long" in text
    row = next(line for line in text.splitlines() if line.startswith("| micro(threshold_start=released)"))
    assert "settled=0.2139, from step=300 **fails**" in row and "settled=0.0412, from step=1500 |" in row
    assert row.count(" | ") == 2  # the subject's own | are escaped: three cells
    assert "epochs=200" not in text  # one subject, both lengths, one row
    assert "30 min: no finished MiCRO runs" in text and "(not measured)" in text
    assert "slope" not in text  # numbers only where the verdicts differ


def test_subjects_pair_without_their_run_length_unless_that_merges_two_of_one_study():
    bare = "oktopk(variant=released) | mlp/fashion_mnist | d=0.01"
    short = {bare: {"numbers": {"worst": 13.5}, "held": None}}
    long = {"oktopk(variant=released) | mlp/fashion_mnist epochs=100 max_steps=600 | d=0.01": {"numbers": {"worst": 13.5}, "held": None},
            "oktopk(variant=released) | mlp/fashion_mnist epochs=200 max_steps=3000 | d=0.01": {"numbers": {"worst": 5.3}, "held": None},
            "oktopk(variant=paper) | mlp/fashion_mnist epochs=100 max_steps=600 | d=0.01": {"numbers": {"worst": 0.77}, "held": True}}
    rows = compare_claims.paired(short, long)
    assert [(row["subject"], row["short"] is not None, row["long"] is not None) for row in rows] == [
        (bare, True, False),
        ("oktopk(variant=released) | mlp/fashion_mnist epochs=100 max_steps=600 | d=0.01", False, True),
        ("oktopk(variant=released) | mlp/fashion_mnist epochs=200 max_steps=3000 | d=0.01", False, True),
        ("oktopk(variant=paper) | mlp/fashion_mnist | d=0.01", False, True)]
    # Only the run length goes: other overrides (the selection study's kernels) still tell subjects apart.
    assert compare_claims.RUN_LENGTH.sub("", "x | resnet18/fashion_mnist max_steps=18 warmup_steps=10 kernels=auto") == \
        "x | resnet18/fashion_mnist warmup_steps=10 kernels=auto"


def test_the_side_by_side_page_is_published_and_checked_from_the_published_claims(tmp_path):
    """From docs/measured/claims.json and claims_long.json (page records, whose data is claims.json)
    to claims_compare.md/.json, which analysis.measured --check renders again from its JSON."""
    from experiments.studies.reproduce.__main__ import publish_comparison
    source = {"commit": "a" * 40, "runs": 81, "runs_at_other_commits": 0, "dirty": False, "machine": "2-core x",
              "torch": "2.14.1", "wall_seconds": 6543, "published": "2026-12-04", "published_at": None}
    assert publish_comparison(tmp_path) is None  # nothing to compare yet
    for name, record in (("claims", SHORT), ("claims_long", LONG)):
        measured.publish(name, name, "make reproduce", "analysis.claims.output:measured_page", record,
                         {**source, "runs": record["runs_judged"]}, pages=tmp_path)
    page = publish_comparison(tmp_path)
    assert page == tmp_path / "claims_compare.md"
    text = page.read_text()
    assert "### `density.micro`: DOES_NOT_HOLD in 30 min, HOLDS long" in text
    assert "long (`make reproduce LONG=1`): 81 runs judged, at `aaaaaaaaaaaa`, 109 min 03 s" in text
    assert measured.check(tmp_path) == []


def test_long_publish_writes_claims_long_then_the_comparison(tmp_path):
    """`make reproduce LONG=1 ARGS=--publish`: claims_long.md/.json (the 30-minute claims.md left
    alone), then claims_compare.md once the 30-minute page is there too."""
    from experiments.studies.reproduce.__main__ import publish_claims, publish_comparison
    out = tmp_path / "out"
    out.mkdir()
    record = out / "claims.json"
    record.write_text(json.dumps(LONG))
    page = publish_claims(record, out, 6543.0, pages=tmp_path / "pages", long=True)
    assert page.name == "claims_long.md" and not (tmp_path / "pages" / "claims.md").exists()
    assert "`make reproduce LONG=1`" in page.read_text()
    assert publish_comparison(tmp_path / "pages") is None
    record.write_text(json.dumps(SHORT))
    publish_claims(record, out, 1373.0, pages=tmp_path / "pages")
    assert publish_comparison(tmp_path / "pages") == tmp_path / "pages" / "claims_compare.md"
    assert measured.check(tmp_path / "pages") == []


def test_a_finished_selection_study_is_reused_an_unfinished_one_is_not(tmp_path):
    from experiments.studies.reproduce import selection
    from experiments.studies.reproduce.__main__ import selection_done
    study = selection.QUICK
    names = [f"{m}_w{w}_{k}" for m in selection.METHODS for w in study["workers"] for k in selection.KERNEL_PATHS]
    assert not selection_done(tmp_path, study)
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / STATUS).write_text(json.dumps({"status": "done"}))
    assert selection_done(tmp_path, study)
    (tmp_path / names[-1] / STATUS).write_text(json.dumps({"status": "running"}))
    assert not selection_done(tmp_path, study)


def test_reproduce_md_names_exactly_the_claims_the_published_studies_disagree_on():
    """docs/reproduce.md's side-by-side prose is typed, so it is held to the published records:
    each study's verdict counts, and the claims it says change verdict (the ids in its bullets'
    bold lead-ins), against docs/measured/claims_compare.json."""
    pages = REPO / "docs" / "measured"
    compared = json.loads((pages / "claims_compare.json").read_text())["data"]
    differing = {row["id"] for row in compared["rows"] if row["short"] != row["long"]}
    text = (REPO / "docs" / "reproduce.md").read_text()
    side_by_side = text.split("### The two regimes side by side", 1)[1].split("\n**Publishing.**", 1)[0]
    changed = side_by_side.split("Seven claims fail in both regimes", 1)[0]
    named = set()
    for lead in re.findall(r"^- \*\*(.*?)\*\*", changed, re.M | re.S):
        named |= set(re.findall(r"`([a-z_.]+)`", lead))
    assert named == differing, f"reproduce.md names {sorted(named)}, the published studies differ on {sorted(differing)}"
    counts = []
    for name in ("claims", "claims_long"):
        verdicts = [claim["verdict"] for claim in json.loads((pages / f"{name}.json").read_text())["data"]["claims"]]
        counts.append((verdicts.count("HOLDS"), verdicts.count("DOES_NOT_HOLD")))
    (short_holds, short_fails), (long_holds, long_fails) = counts
    assert (f"{short_holds} HOLDS and {short_fails} DOES_NOT_HOLD in 30 minutes, {long_holds} HOLDS and "
            f"{long_fails} DOES_NOT_HOLD long") in " ".join(side_by_side.split())
    both = short_fails - len([row for row in compared["rows"] if row["short"] == "DOES_NOT_HOLD" != row["long"]])
    assert f"{['Zero', 'One', 'Two', 'Three', 'Four', 'Five', 'Six', 'Seven', 'Eight', 'Nine'][both]} claims fail in both" in side_by_side
