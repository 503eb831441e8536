"""The measured pages (docs/measured/): every table the README and the docs quote is rendered from
the data beside it, at a commit of this repository, and the README links each page."""
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


def test_the_readme_quotes_no_measured_table_of_its_own():
    """The README's numbers live in the pages: no verdict table, no speedup table."""
    text = (REPO / "README.md").read_text()
    assert not re.search(r"^\| `[a-z_.]+` \| (HOLDS|DOES_NOT_HOLD|NOT_MEASURABLE) \|", text, re.M)
    assert not re.search(r"^\|[^|\n]*\| [0-9.]+ / [0-9.]+ / [0-9.]+", text, re.M)


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
