"""The house's one import rule, read from the source (every import, function-level ones included):
a package imports only what lies below it. docs/architecture.md draws the floors; a shortcut
across them, or a cycle between modules, fails here instead of in a review."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOPS = ("experiments", "sparsifiers", "models", "datasets", "analysis")

# Bottom to top. A package may import its own modules and any package on a lower floor; packages
# on one floor are independent of each other.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("experiments.runformat",),  # what a run writes and how it is read; errors, settings, caches
    ("sparsifiers.common",),  # the methods' shared machinery: the protocol, layout, kernels
    ("sparsifiers.methods", "models", "datasets"),  # one file per method; the models; the data
    ("sparsifiers.registry",),  # the methods by name, with their traits
    ("experiments.engine.core", "analysis"),  # one step over hosted ranks; reading runs
    ("experiments.engine.rank",),  # a rank process: builds, trains, logs
    ("experiments.engine.launcher",),  # the parent: composes, checks, launches, reports a sweep
    ("experiments.engine.ddp",),  # the hook in a user's own DDP script
    ("experiments.studies.benchmarks", "experiments.studies.calibrate", "experiments.studies.reproduce"),
    ("experiments.studies.endtoend",),  # drives make reproduce's sweep runner
    ("experiments.studies.compare",),  # the battery: make reproduce's sweeps, make endtoend's step model
)
FLOOR_OF = {package: level for level, packages in enumerate(FLOORS) for package in packages}


def package_of(module: str) -> str | None:
    """The floor package a dotted module belongs to, or None (third-party, the standard library,
    a top-level file such as run.py)."""
    parts = module.split(".")
    if parts[0] not in TOPS:
        return None
    if parts[0] == "sparsifiers":
        if len(parts) == 1:
            return "sparsifiers.registry"  # sparsifiers/__init__.py: the package's face
        if parts[1] in ("common", "registry"):
            return f"sparsifiers.{parts[1]}"
        return "sparsifiers.methods"
    if parts[0] == "experiments":
        if len(parts) >= 3 and parts[1] in ("engine", "studies"):
            return ".".join(parts[:3])
        if len(parts) >= 2 and parts[1] == "runformat":
            return "experiments.runformat"
        return "experiments"  # the package's own __init__: imports nothing
    return parts[0]


def module_of_file(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, module) of every import in `source`, function-level imports included, relative
    imports resolved; `from a import b` names a.b too (b may be a module)."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def source_files() -> list[Path]:
    return [path for top in TOPS for path in sorted((ROOT / top).rglob("*.py"))]


def known_modules() -> set[str]:
    return {module_of_file(path) for path in source_files()}


def test_every_package_stands_on_a_floor():
    """experiments/ holds three rooms (runformat, engine, studies) and nothing loose; every
    subpackage of engine/ and studies/ is on a floor, so a new one is a decision, not an accident."""
    experiments = ROOT / "experiments"
    loose = sorted(p.name for p in experiments.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules at the experiments/ root: {loose}; put each in a room (docs/architecture.md)"
    rooms = sorted(p.name for p in experiments.iterdir() if (p / "__init__.py").exists())
    assert rooms == ["engine", "runformat", "studies"]
    for room in ("engine", "studies"):
        for package in sorted(p for p in (experiments / room).iterdir() if (p / "__init__.py").exists()):
            assert f"experiments.{room}.{package.name}" in FLOOR_OF, f"{package} is on no floor of FLOORS"
    assert (experiments / "__init__.py").read_text().count("import") == 0


@pytest.mark.parametrize("path", source_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_package_imports_only_what_lies_below_it(path: Path):
    module = module_of_file(path)
    home = package_of(module)
    if home not in FLOOR_OF:
        return  # experiments/__init__.py, checked above
    bad = []
    for line, imported in imported_modules(path.read_text(), module, path.name == "__init__.py"):
        there = package_of(imported)
        if there is None or there == home or there == "experiments":
            continue
        if FLOOR_OF[there] >= FLOOR_OF[home]:
            bad.append(f"line {line}: {imported} ({there}, floor {FLOOR_OF[there]})")
    assert not bad, f"{path.relative_to(ROOT)} ({home}, floor {FLOOR_OF[home]}) imports upward or sideways: {bad}"


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (a name imported from a package counts as the
    module when it is one, else as the package)."""
    modules = known_modules()
    graph: dict[str, set[str]] = {}
    for path in source_files():
        module = module_of_file(path)
        targets = set()
        for _, imported in imported_modules(path.read_text(), module, path.name == "__init__.py"):
            if imported in modules and imported != module:
                targets.add(imported)
        # `from a import b` listed both a and a.b: keep a only when b is not a module of a
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]

    def visit(start: str) -> None:
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter[0]; counter[0] += 1
        stack.append(start); on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]; counter[0] += 1
                    stack.append(child); on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop(); on_stack.discard(member); component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_inside_experiments():
    graph = import_graph()
    inside = {module: {t for t in targets if t.startswith("experiments")} for module, targets in graph.items()
              if module.startswith("experiments")}
    assert cycles(inside) == []


def test_the_checkers_see_a_violation_and_a_cycle():
    """The checkers themselves: a core module importing the rank process inside a function, one
    reaching the launcher by a relative import, and a two-module cycle, are all seen."""
    source = "def f():\n    from experiments.engine.rank.worker import main\nfrom ..launcher import validate\n"
    imported = [package_of(m) for _, m in imported_modules(source, "experiments.engine.core.step", False)]
    assert "experiments.engine.rank" in imported and "experiments.engine.launcher" in imported
    assert all(FLOOR_OF[p] > FLOOR_OF["experiments.engine.core"] for p in imported if p in FLOOR_OF and p != "experiments")
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
