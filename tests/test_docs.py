"""The project's own documentation stands alone and stays true to the code.

A clone of the repository must be able to follow every link of README.md, CONTRIBUTING.md and
docs/: each one is relative and lands on a file of the repository (and on a heading that exists,
when it names one). Nothing points outside: no web address, no guidance docs kept beside the
repository. The README stays a map (a page, the two quickstart commands) that links every page
of docs/ and, beside each command that measures something, the page generated from that
measurement; docs/README.md indexes every page. And the
docs cover what the code has: every sparsifier option has its section in docs/algorithms.md,
every metric the step logs is defined in docs/metrics.md, and the worked example of
docs/adding_a_sparsifier.md runs through the production step.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import yaml
from hydra.utils import get_object
from omegaconf import OmegaConf

from experiments.engine.core.metrics import RANK_STATS, MetricContext, exchange_metrics, rank_metrics
from experiments.engine.core.traffic import dense_allreduce_bytes
from sparsifiers.common.layout import Layout
from tests.conftest import REPO
from tests.helpers.partitioned_topk import example_blocks
from tests.helpers.stepped_ranks import SteppedRanks, noise

DOCS = sorted([REPO / "README.md", REPO / "CONTRIBUTING.md", *(REPO / "docs").rglob("*.md")])
SPARSIFIER_CONF = REPO / "conf" / "sparsifier"
# Web addresses the docs may contain as links. None so far: a paper is cited by title, a released
# code base by its repository's name, a data source as plain code text.
ALLOWED_URLS: tuple[str, ...] = ()

FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
AUTOLINK = re.compile(r"<([a-zA-Z][a-zA-Z0-9+.-]*:[^>\s]*)>")
BARE_URL = re.compile(r"(?:https?|ftp)://\S+|www\.\S+", re.I)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose(text: str) -> str:
    """The text a Markdown renderer turns into links: no fenced blocks, no code spans."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(text: str) -> list[str]:
    """Targets of inline links and images, reference definitions and autolinks."""
    body = prose(text)
    return INLINE_LINK.findall(body) + REFERENCE_DEF.findall(body) + AUTOLINK.findall(body)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, with GitHub's -1, -2 suffixes for repeats."""
    seen: dict[str, int] = {}
    found = set()
    for line in FENCE.sub("", path.read_text()).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            found.add(base if count == 0 else f"{base}-{count}")
            seen[base] = count + 1
    return found


def relative(path: Path) -> str:
    return str(path.relative_to(REPO))


# The pages a user comes for; the README links these and every other page of docs/.
PAGES = ("quickstart.md", "running.md", "results.md", "analysis.md", "paper_experiments.md", "sparsifiers.md",
         "ddp_hook.md", "speed.md", "layout.md", "architecture.md", "metrics.md", "algorithms.md",
         "reproducibility.md", "claims.md", "adding_a_sparsifier.md", "reproduce.md", "endtoend.md", "network.md")
README_MAX_LINES = 100  # a map, read in a minute or two; the reference lives in docs/
QUICKSTART = ["make run", "make test"]


def test_the_docs_exist_and_the_readme_links_each_of_them():
    readme = {target.split("#")[0] for target in links((REPO / "README.md").read_text())}
    for name in PAGES:
        assert (REPO / "docs" / name).is_file(), name
    pages = {f"docs/{path.name}" for path in (REPO / "docs").glob("*.md")}
    assert not pages - readme, f"README links no {sorted(pages - readme)}"


def measured_by() -> dict[str, str]:
    """docs/measured/README.md's table: each generated page and the command that measures it."""
    rows = re.findall(r"^\| \[[^\]]+\]\(([a-z_]+\.md)\) \| `([^`]+)` \|", (REPO / "docs" / "measured" / "README.md").read_text(), re.M)
    return {f"docs/measured/{page}": command for page, command in rows}


def test_the_readme_links_each_generated_page_beside_the_command_that_measures_it():
    """A measured number is read where it is generated: the README names the command and links
    its page on the same line, and quotes none of the numbers (tests/test_measured_pages.py)."""
    pages = measured_by()
    assert set(pages) == {f"docs/measured/{path.name}" for path in (REPO / "docs" / "measured").glob("*.md")} - \
        {"docs/measured/README.md"}, "docs/measured/README.md's table misses a page"
    lines = FENCE.sub("", (REPO / "README.md").read_text()).splitlines()
    for page, command in pages.items():
        assert any(page in [target.split("#")[0] for target in links(line)] and
                   re.search(rf"`{re.escape(command)}[`\s]", line) for line in lines), \
            f"README has no line that names `{command}` and links {page}"


def section(text: str, heading: str) -> str:
    """The body of a '## heading' section, up to the next heading of that level or above."""
    match = re.search(rf"^## {re.escape(heading)}\s*$(.*?)(?=^#{{1,2}} |\Z)", text, re.S | re.M)
    assert match, f"no section '## {heading}'"
    return match.group(1)


def test_the_readme_is_a_map_with_the_two_quickstart_commands():
    text = (REPO / "README.md").read_text()
    lines = text.count("\n") + (not text.endswith("\n"))
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines, more than {README_MAX_LINES}: move reference to docs/"
    blocks = re.findall(r"^```\w*\n(.*?)^```", section(text, "Quickstart"), re.S | re.M)
    assert blocks, "the Quickstart has no command block"
    commands = [line.split("#")[0].strip() for line in blocks[0].splitlines() if line.split("#")[0].strip()]
    assert commands == QUICKSTART, f"the Quickstart's commands are {commands}, not {QUICKSTART}"


@pytest.mark.parametrize("doc", DOCS, ids=relative)
def test_every_link_is_relative_and_resolves_inside_the_repository(doc):
    text = doc.read_text()
    # the guidance notes beside the repository are not in a user's clone: never named, never linked
    assert not re.search(r"\.\./shared\b|shared/(DESIGN|ALGORITHMS|STYLE|WORKLOADS)\.md", text), \
        f"{relative(doc)} points at the guidance docs beside the repository"
    for url in BARE_URL.findall(prose(text)):
        assert url.startswith(ALLOWED_URLS) and ALLOWED_URLS, f"{relative(doc)}: a web address outside code: {url}"
    targets = links(text)
    for target in targets:
        if SCHEME.match(target) or target.startswith("//"):
            assert target.startswith(ALLOWED_URLS) and ALLOWED_URLS, f"{relative(doc)}: a link outside the repository: {target}"
            continue
        assert not target.startswith("/"), f"{relative(doc)}: an absolute path: {target}"
        file_part, _, anchor = target.partition("#")
        resolved = (doc.parent / file_part).resolve() if file_part else doc
        assert resolved.is_relative_to(REPO), f"{relative(doc)}: {target} leaves the repository"
        assert resolved.is_file(), f"{relative(doc)}: {target} names no file of the repository"
        if anchor:
            assert resolved.suffix == ".md", f"{relative(doc)}: {target}: an anchor into a file without headings"
            assert anchor in anchors(resolved), f"{relative(doc)}: {target}: no heading '{anchor}' in {relative(resolved)}"


def test_the_link_check_sees_links_and_rejects_bad_ones(tmp_path):
    """The checker itself: what it must find and refuse, so that the test above can fail."""
    sample = ("See [a](docs/a.md#x-y), ![fig](f.png) and <https://example.org>.\n"
              "`[not](a_link.md)`\n```\n[not](either.md)\n```\n[ref]: ../outside/NOTES.md\n")
    assert links(sample) == ["docs/a.md#x-y", "f.png", "../outside/NOTES.md", "https://example.org"]
    assert BARE_URL.findall(prose("go to https://example.org now, or `https://fine.org`")) == ["https://example.org"]
    assert slug("The papers' experiments") == "the-papers-experiments"
    assert slug("Threshold comparison (`comparison`, micro)") == "threshold-comparison-comparison-micro"
    page = tmp_path / "page.md"
    page.write_text("# Top\n## Same\n## Same\n")
    assert anchors(page) == {"top", "same", "same-1"}


def sparsifier_options() -> list[str]:
    return sorted(path.stem for path in SPARSIFIER_CONF.glob("*.yaml"))


def test_every_sparsifier_has_a_section_in_the_algorithms_doc():
    sections = anchors(REPO / "docs" / "algorithms.md")
    missing = [name for name in sparsifier_options() if name not in sections]
    assert not missing, f"docs/algorithms.md has no section '## <name>' for: {missing}"


def build(option: str, layout: Layout, world_size: int, rank: int):
    """One sparsifier from its config file, as experiments/engine/rank/build.py builds it."""
    node = OmegaConf.to_container(OmegaConf.load(SPARSIFIER_CONF / f"{option}.yaml"))
    knobs = {key: value for key, value in node.items() if not key.startswith("_") and key != "name"}
    return get_object(node["_target_"])(layout=layout, world_size=world_size, rank=rank, seed=0, **knobs)


def defined_metric_keys(path: Path) -> set[str]:
    """The keys a table row of the page defines: backticked in the row's first cell. A mention
    in prose or in another row's definition (`traffic/ratio` = `traffic/sent_bytes_mean` / ...)
    defines nothing."""
    keys: set[str] = set()
    for line in path.read_text().splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            keys |= set(re.findall(r"`([a-z0-9_]+(?:/[a-z0-9_]+)?)`", line.split("|")[1]))
    return keys


def test_the_metrics_doc_defines_keys_only_in_a_rows_first_cell(tmp_path: Path):
    page = tmp_path / "metrics.md"
    page.write_text("Prose mentions `a/prose`.\n\n| key | definition |\n|---|---|\n"
                    "| `a/defined`, `b/too` | uses `a/used` |\n")
    assert defined_metric_keys(page) == {"a/defined", "b/too"}


def test_every_metric_the_step_logs_is_defined_in_the_metrics_doc():
    """The keys of a real step of every sparsifier: the shared metrics and each method's state."""
    documented = defined_metric_keys(REPO / "docs" / "metrics.md")
    layout = Layout.from_shapes([("w", (64, 32)), ("b", (64,))])
    keys: set[str] = set(rank_metrics(torch.rand(2, len(RANK_STATS))))
    for option in sparsifier_options():
        if option == "dense":  # selects nothing (None: every coordinate) and logs no state of its own
            continue
        world = SteppedRanks([build(option, layout, 2, rank) for rank in range(2)])
        for sparsifier in world.sparsifiers:
            sparsifier.start_epoch(0, 10)
        step = world.step(next(noise(layout.numel, 2, seed=1)), 0)
        method = world.sparsifiers[0]
        context = MetricContext(layout.numel, method.k, method.density, method.scope, 2,
                                dense_allreduce_bytes(layout.numel, 2, 4), exchange=method.exchange)
        keys |= set(exchange_metrics(step.result, world.comm.meter, context)) | set(method.metrics())
    missing = sorted(keys - documented)
    assert not missing, f"docs/metrics.md does not define: {missing}"


def test_the_worked_example_runs_through_the_production_step():
    """The example sparsifier, its config and its reference test, exactly as the page shows them."""
    blocks = example_blocks()
    module, reference_test = blocks["python"]
    namespace: dict = {"__name__": "docs_example"}
    exec(compile(module, "docs/adding_a_sparsifier.md (module)", "exec"), namespace)
    exec(compile(reference_test, "docs/adding_a_sparsifier.md (test)", "exec"), namespace)
    cls = namespace["PartitionedTopK"]
    config = yaml.safe_load(blocks["yaml"][0])
    assert config["_target_"].rsplit(".", 1)[1] == cls.__name__ and config["name"] == cls.name
    assert config["exchange"] == cls.exchanges[0].value
    knobs = {key: value for key, value in config.items() if not key.startswith("_") and key != "name"}
    built = cls(layout=Layout.from_shapes([("w", (1000,))]), world_size=2, rank=1, seed=0, **knobs)
    assert built.k == 10 and built.error_feedback  # density 0.01 of 1,000 elements
    namespace["test_partitioned_topk_is_the_top_of_each_partition"]()
