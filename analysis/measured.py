"""Measured pages: the tables the docs quote and the README links, each generated from the data
it was measured from, never typed by hand (docs/measured/).

    docs/measured/<name>.json   {"name", "title", "command", "render", "provenance", "data"}
    docs/measured/<name>.md     the page: a header from the provenance, then render(data)
    docs/measured/<name>.html   where the record names `render_html`: render_html(data) (the leaderboard's sortable table)

`render` names the function that turns `data` into the page's body ("module:function"), so that
anyone can render a page again from its JSON: `check` does, and tests/test_measured_pages.py fails
when a page and its data disagree (a hand edit, or a renderer changed since the page was made).
The provenance is read from the runs themselves (their env.json): the commit they ran at, whether
the tree had uncommitted changes, the machine, and the study's wall time.

    python -m analysis.measured --check      # every page against its data (exit 1 on a difference)

Pages are written by the studies that measure them, on request: `make reproduce ARGS=--publish`
(claims), `make endtoend ARGS=--publish` (end-to-end), `make compare ... ARGS=--publish` (the
leaderboard) and `python -m analysis.report SWEEP --publish quickstart` (the quickstart's
comparison, after `make run`).
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from analysis.discover import find_run_dirs
from experiments.runformat.run_dir import ENV, try_read_json, write_atomic

PAGES = Path(__file__).resolve().parent.parent / "docs" / "measured"
INDEX = "README.md"  # the folder's own index: the one page there that is not measured


def provenance(run_roots: list[Path], wall_seconds: float | None) -> dict[str, Any]:
    """Where the runs below `run_roots` were measured, from their env.json: the commit (the most
    common one, with how many runs ran at another), a dirty tree, the machine, and the wall time."""
    envs = [env for env in (try_read_json(run / ENV) for run in find_run_dirs(run_roots)) if env]
    commits = Counter((env.get("git") or {}).get("commit") for env in envs)
    commit, at_commit = commits.most_common(1)[0] if commits else (None, 0)
    devices = Counter(_machine((env.get("device") or {})) for env in envs)
    versions = Counter((env.get("versions") or {}).get("torch") for env in envs)
    return {
        "commit": commit,
        "runs": len(envs),
        "runs_at_other_commits": len(envs) - at_commit,
        "dirty": any((env.get("git") or {}).get("dirty") for env in envs),
        "machine": devices.most_common(1)[0][0] if devices else None,
        "torch": versions.most_common(1)[0][0] if versions else None,
        "wall_seconds": None if wall_seconds is None else round(float(wall_seconds)),
        "published": datetime.date.today().isoformat(),
        "published_at": _head(),
    }


def _head() -> str | None:
    """This checkout's commit: the code that judged and rendered the runs (None outside git)."""
    try:
        found = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PAGES.parent.parent, capture_output=True, text=True)
    except OSError:
        return None
    return found.stdout.strip() or None if found.returncode == 0 else None


def run_command(run_roots: list[Path]) -> str:
    """The command line most of the runs below `run_roots` were started with (env.json's argv)."""
    argvs = Counter(tuple((try_read_json(run / ENV) or {}).get("argv") or ()) for run in find_run_dirs(run_roots))
    argv = [Path(part).name if index == 0 else part for index, part in enumerate(argvs.most_common(1)[0][0])]
    return "python " + " ".join(argv) if argv else "an unknown command"


def _machine(device: dict[str, Any]) -> str:
    gpus = device.get("gpus")
    cpu = f"{device.get('cpu_count') or '?'}-core {device.get('cpu_model') or device.get('cpu') or 'CPU'}"
    return f"{cpu}, {gpus[0]} x{len(gpus)}" if gpus else f"{cpu}, CPU only"


def header(record: dict[str, Any]) -> str:
    """The page's first lines: what it is, the command, and where and when it was measured."""
    source = record["provenance"]
    commit = source["commit"] or "an unknown commit"
    notes = []
    if source["dirty"]:
        notes.append("with uncommitted changes")
    if source["runs_at_other_commits"]:
        notes.append(f"{source['runs_at_other_commits']} of {source['runs']} runs at other commits")
    published_at = source.get("published_at")  # absent in pages published before it was recorded
    if published_at and published_at != source["commit"]:
        notes.append(f"judged and rendered at `{published_at[:12]}`")
    wall = source["wall_seconds"]
    took = f", {wall // 60} min {wall % 60:02d} s" if wall is not None else ""
    return "\n".join([
        f"# {record['title']}",
        "",
        "<!-- Generated from the JSON beside this page by analysis/measured.py; do not edit by hand. -->",
        "",
        f"`{record['command']}` at commit `{commit}`" + (f" ({'; '.join(notes)})" if notes else "")
        + f": {source['runs']} runs on a {source['machine']}, torch {source['torch']}{took}; "
        + f"published {source['published']}.",
        "",
    ])


def renderer(path: str) -> Callable[[Any], str]:
    """"module:function" -> the function."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def page_text(record: dict[str, Any]) -> str:
    return header(record) + "\n" + renderer(record["render"])(record["data"]).rstrip("\n") + "\n"


def publish(name: str, title: str, command: str, render: str, data: Any, source: dict[str, Any],
            pages: Path = PAGES, render_html: str | None = None) -> Path:
    """Writes <name>.json and <name>.md into `pages` (and <name>.html, rendered by `render_html`,
    when given); returns the page's path. The pages are rendered from the JSON as written and read
    back, so what `check` renders is exactly what was written."""
    record = {"name": name, "title": title, "command": command, "render": render, "provenance": source, "data": data,
              **({"render_html": render_html} if render_html else {})}
    text = json.dumps(record, indent=1, allow_nan=False) + "\n"
    pages.mkdir(parents=True, exist_ok=True)
    page = pages / f"{name}.md"
    written = json.loads(text)
    write_atomic(page, page_text(written))
    if render_html:
        write_atomic(pages / f"{name}.html", renderer(render_html)(written["data"]))
    write_atomic(pages / f"{name}.json", text)
    return page


def check(pages: Path = PAGES) -> list[str]:
    """The pages that differ from what their JSON renders (or that have no JSON, or JSON no page)."""
    problems = []
    for data in sorted(pages.glob("*.json")):
        page = data.with_suffix(".md")
        if not page.is_file():
            problems.append(f"{data.name}: no {page.name} beside it")
        elif page.read_text() != page_text(json.loads(data.read_text())):
            problems.append(f"{page.name}: differs from what {data.name} renders (publish it again)")
        problems += _html_problems(data)
    problems += [f"{page.name}: no {page.stem}.json beside it" for page in sorted(pages.glob("*.md"))
                 if page.name != INDEX and not page.with_suffix(".json").is_file()]
    return problems


def _html_problems(data: Path) -> list[str]:
    """The HTML page a record names a renderer for (`render_html`), against what its data renders."""
    record = json.loads(data.read_text())
    if "render_html" not in record:
        return []
    page = data.with_suffix(".html")
    if not page.is_file():
        return [f"{data.name}: no {page.name} beside it"]
    if page.read_text() != renderer(record["render_html"])(record["data"]):
        return [f"{page.name}: differs from what {data.name} renders (publish it again)"]
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.measured", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="render every page from its JSON and compare")
    parser.add_argument("--pages", type=Path, default=PAGES, help="the folder of pages (default docs/measured)")
    options = parser.parse_args(argv)
    if not options.check:
        parser.print_help()
        return 0
    problems = check(options.pages)
    print("\n".join(problems) if problems else f"every page in {options.pages} matches its data")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
