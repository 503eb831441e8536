"""The architecture's import rules, read from the source (every import, function-level ones
included), so a shortcut across roles fails here instead of in a review.

Roles (docs/architecture.md): experiments/core (the step), experiments/rank (the rank process),
experiments/launcher (the parent), experiments/benchmarks, experiments/ddp (the hook in a user's
own DDP script); the modules at the experiments/ root
are neutral (errors, run directory, headline metrics, runtime settings) and anyone may use them.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROLES = ("core", "rank", "launcher", "benchmarks", "ddp", "reproduce", "calibrate", "endtoend")
# importer -> roles of experiments/ it must not import
FORBIDDEN = {
    "core": {"rank", "launcher", "benchmarks", "ddp", "reproduce", "calibrate", "endtoend", "analysis"},
    "rank": {"launcher", "benchmarks", "ddp", "reproduce", "calibrate", "endtoend", "analysis"},  # a rank writes runs; reading them is the analysis'
    "launcher": {"benchmarks", "ddp", "reproduce", "calibrate", "endtoend"},
    # the hook in a user's own DDP script: it checks a sparsifier node as the launcher does, builds
    # it as a rank does and drives the core; nothing of sparsebench's own runs depends on it
    "ddp": {"benchmarks", "analysis", "reproduce", "calibrate", "endtoend"},
    # `make reproduce` drives the runs, the analysis and the claims; nothing imports it
    "reproduce": {"benchmarks", "ddp", "calibrate", "endtoend"},
    # `make calibrate` times real collectives and fits the core's network model; it needs nothing
    # of a run, and nothing imports it
    "calibrate": {"rank", "launcher", "benchmarks", "ddp", "reproduce", "endtoend", "analysis"},
    # `make endtoend` drives runs (with make reproduce's sweep runner), reads them, measures a model
    # as a rank builds it and prices steps with the core's network model; nothing imports it
    "endtoend": {"benchmarks", "ddp", "calibrate"},
    # neutral modules are below everything, the sparsifiers and the analysis included
    "neutral": {"core", "rank", "launcher", "benchmarks", "ddp", "reproduce", "calibrate", "endtoend", "sparsifiers", "models", "datasets", "analysis"},
    "sparsifiers": {"core", "rank", "launcher", "benchmarks", "ddp", "reproduce", "calibrate", "endtoend", "analysis"},
    "models": {"core", "rank", "launcher", "benchmarks", "ddp", "reproduce", "calibrate", "endtoend", "analysis"},
    "datasets": {"core", "rank", "launcher", "benchmarks", "ddp", "reproduce", "calibrate", "endtoend", "analysis"},
    "analysis": {"core", "rank", "launcher", "benchmarks", "ddp", "reproduce", "calibrate", "endtoend"},
}


def role_of_module(name: str) -> str | None:
    """The role of an imported module name: a role of experiments/, "neutral", one of the other
    top-level packages, or None (third-party, the standard library)."""
    parts = name.split(".")
    if parts[0] in ("sparsifiers", "models", "datasets", "analysis"):
        return parts[0]
    if parts[0] != "experiments" or len(parts) == 1:
        return None
    return parts[1] if parts[1] in ROLES else "neutral"


def role_of_file(path: Path) -> str | None:
    parts = path.relative_to(ROOT).parts
    if parts[0] == "experiments":
        return parts[1] if len(parts) > 2 and parts[1] in ROLES else "neutral"
    return parts[0] if parts[0] in FORBIDDEN else None


def imported_modules(source: str, package: str) -> list[tuple[int, str]]:
    """(line, module) of every import in `source`, a module of `package`, function-level imports
    included and relative imports resolved."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found.append((node.lineno, base))
            # `from experiments import core` names a role too
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names if base == "experiments"]
    return found


def source_files() -> list[Path]:
    files = []
    for top in ("experiments", "sparsifiers", "models", "datasets", "analysis"):
        files += sorted((ROOT / top).rglob("*.py"))
    return files


def test_every_experiments_module_is_in_a_role_or_listed_as_neutral():
    """A module at the experiments/ root is neutral: it may not import any role (checked
    below); listing them makes a new root module a decision, not an accident. A new subpackage
    must be a role, or its files would count as neutral unseen."""
    root = ROOT / "experiments"
    neutral = sorted(p.stem for p in root.glob("*.py") if p.stem != "__init__")
    assert neutral == sorted(NEUTRAL), f"experiments/ root modules changed: {neutral}; update NEUTRAL and docs/architecture.md"
    packages = sorted(p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert packages == sorted(ROLES), f"experiments/ subpackages {packages}: each must be one of the roles {ROLES}"
    assert (root / "__init__.py").read_text().count("import") == 0  # importing a neutral module pulls in no role


# The neutral modules: facts every role needs (docs/architecture.md, "Three roles").
NEUTRAL = ("caches", "console", "errors", "headline", "metric_keys", "run_dir", "runtime", "store")


@pytest.mark.parametrize("path", source_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_follow_the_layers(path: Path):
    role = role_of_file(path)
    if role is None:
        return
    package = ".".join(path.relative_to(ROOT).parts[:-1])
    bad = [f"line {line}: {module}" for line, module in imported_modules(path.read_text(), package)
           if role_of_module(module) in FORBIDDEN.get(role, set())]
    assert not bad, f"{path.relative_to(ROOT)} ({role}) imports across the layers: {bad}"


def test_the_rule_checker_sees_a_violation():
    """The checker itself: a core module importing the rank process inside a function, and one
    reaching the launcher by a relative import, are both seen."""
    assert role_of_file(ROOT / "experiments" / "core" / "step.py") == "core"
    source = "def f():\n    from experiments.rank.worker import main\nfrom ..launcher import validate\n"
    roles = [role_of_module(module) for _, module in imported_modules(source, "experiments.core")]
    assert sorted(roles) == ["launcher", "rank"]
    assert FORBIDDEN["core"] >= {"rank", "launcher"}
