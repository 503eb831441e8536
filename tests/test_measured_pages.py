"""The measured pages (docs/measured/): every table the docs quote is rendered from the data
beside it, at a commit of this repository; the README links each page and quotes no number."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from analysis import measured, report
from analysis.synthetic import write_sweep

REPO = Path(__file__).resolve().parent.parent
PAGES = REPO / "docs" / "measured"
# The tables a reader is shown, and the doc that links each besides the README.
LINKED_FROM = {"claims": "docs/reproduce.md", "endtoend": "docs/endtoend.md", "quickstart": "docs/quickstart.md"}


def test_every_measured_page_is_what_its_data_renders():
    assert measured.check(PAGES) == []


@pytest.mark.parametrize("name", sorted(LINKED_FROM))
def test_each_table_is_a_measured_page_that_the_readme_and_its_doc_link(name):
    assert (PAGES / f"{name}.json").is_file(), f"docs/measured/{name}.json is missing: publish it (docs/measured/README.md)"
    for doc in ("README.md", LINKED_FROM[name]):
        text = (REPO / doc).read_text()
        base = "docs/measured/" if doc == "README.md" else "measured/"
        assert f"]({base}{name}.md" in text, f"{doc} does not link docs/measured/{name}.md"


@pytest.mark.parametrize("name", sorted(LINKED_FROM))
def test_each_page_was_measured_at_a_commit_of_this_repository(name):
    record = json.loads((PAGES / f"{name}.json").read_text())
    commit = record["provenance"]["commit"]
    assert commit and re.fullmatch(r"[0-9a-f]{40}", commit), f"{name}: no commit recorded"
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    known = subprocess.run(["git", "merge-base", "--is-ancestor", commit, "HEAD"], cwd=REPO, capture_output=True)
    assert known.returncode == 0, f"{name}: commit {commit} is not in this repository's history"


# What a measured number looks like in prose or a table: a time, a verdict or a count of them, a
# speedup, a percentage, a test count, GPU-hours. The README links the pages that own these.
MEASURED_NUMBER = {
    "a verdict": re.compile(r"\b(HOLDS|DOES_NOT_HOLD|NOT_MEASURABLE)\b"),
    "a duration": re.compile(r"\b\d+(?:[.,]\d+)?\s*(?:ms|s|sec|seconds?|min|minutes?|h|hours?)\b", re.I),
    "GPU-hours": re.compile(r"\d[\d,.]*\s+GPU-hours?|^\|.*GPU-hours", re.I | re.M),  # a count, or a table's column
    "a speedup": re.compile(r"\b\d+(?:\.\d+)?x\b"),
    "a percentage": re.compile(r"\d%"),
    "a test count": re.compile(r"\b\d+ (?:passed|failed|skipped)\b"),
    "a table of numbers": re.compile(r"^\|[^|\n]*\| [0-9.]+ / [0-9.]+ / [0-9.]+", re.M),
}


def measured_numbers(text: str) -> list[str]:
    return [f"{kind}: {match.group(0)!r}" for kind, pattern in MEASURED_NUMBER.items() for match in pattern.finditer(text)]


def test_the_readme_quotes_no_measured_number():
    """The README is a map: its numbers live in the pages that generate (docs/measured/) or own
    them (docs/paper_experiments.md's GPU-hours), and it links them."""
    assert measured_numbers((REPO / "README.md").read_text()) == []


def test_the_measured_number_check_finds_what_the_readme_used_to_quote():
    """Lines of the README before it became a map: each one must be caught."""
    old = ["make run    # then the quickstart comparison (about 3 min on 2 cores)",
           "make test   # about 10 min on 2 cores (fresh clone: add 2-3 min of bootstrap)",
           "| `selection.deft` | DOES_NOT_HOLD | 1 of 2 hold |",
           "| claims | runs | GPU-hours | hours, one run after another |",
           "98 runs, about 310 GPU-hours",
           "DEFT 2.33/3.35/3.09/1.36x at W = 8/32/128/1,024 on 10 GbE",
           "MiCRO from 82.38% to 76.72%",
           "2336 passed, 2 skipped"]
    for line in old:
        assert measured_numbers(line), line
    assert measured_numbers("| quickstart | 1.2 / 3.4 / 5.6 |\n")
    assert measured_numbers("Python 3.10+, 4 gloo workers, density 0.001, W = 4 to 1,024, "
                            "paper scale (with estimated GPU-hours)") == []


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A page published from a synthetic sweep's summary, as `analysis.report --publish` does."""
    root = tmp_path_factory.mktemp("measured")
    sweep = root / "sweep"
    write_sweep(sweep, ["topk", "deft", "dense"], [2, 4], seeds=2)
    report.write_report([sweep], sweep / "report", cache=False)
    summary = pd.read_csv(sweep / "report" / "summary.csv")
    pages = root / "pages"
    page = measured.publish("quickstart", "Quickstart", "make run", "analysis.report:summary_page",
                            report.summary_records(summary), measured.provenance([sweep], 61.0), pages=pages)
    return sweep, pages, page


def test_a_published_page_shows_the_reports_own_table(published):
    sweep, pages, page = published
    assert measured.check(pages) == []
    rows = [line for line in page.read_text().splitlines() if line.startswith("| ")]
    report_md = (sweep / "report" / "report.md").read_text()
    assert len(rows) == 2 + 6 and all(row in report_md for row in rows)
    assert "1 min 01 s" in page.read_text()


def copy_of(pages: Path, tmp_path: Path) -> Path:
    target = tmp_path / "pages"
    shutil.copytree(pages, target)
    return target


def test_a_number_changed_in_the_data_is_found(published, tmp_path):
    _, pages, _ = published
    pages = copy_of(pages, tmp_path)
    data = pages / "quickstart.json"
    record = json.loads(data.read_text())
    record["data"][0]["metric"] += 0.01  # one accuracy, one point higher
    data.write_text(json.dumps(record))
    assert measured.check(pages) == ["quickstart.md: differs from what quickstart.json renders (publish it again)"]


def test_a_hand_edited_page_and_a_page_without_data_are_found(published, tmp_path):
    _, pages, _ = published
    pages = copy_of(pages, tmp_path)
    page = pages / "quickstart.md"
    page.write_text(page.read_text().replace("| topk |", "| topk (fast) |"))
    (pages / "typed.md").write_text("| a | b |\n")
    assert measured.check(pages) == ["quickstart.md: differs from what quickstart.json renders (publish it again)",
                                     "typed.md: no typed.json beside it"]
    assert measured.main(["--check", "--pages", str(pages)]) == 1
