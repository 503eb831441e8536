"""The method protocol (issue 38): a small core every method implements (sparsifiers/common/base.py),
capabilities only the methods that need them implement (sparsifiers/common/capabilities.py), and the
exchange as a registry of kinds, one module per family, without an import cycle
(experiments/engine/core/exchange/)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from experiments.engine.core.collectives import RankCollectives
from experiments.engine.core.exchange import EXCHANGES, ExchangeRequest, exchange
from experiments.engine.launcher.compose import compose_job
from experiments.engine.rank.build import build_sparsifier
from sparsifiers import registry
from sparsifiers.common import capabilities
from sparsifiers.common.base import Sparsifier
from sparsifiers.common.capabilities import (
    CAPABILITIES, AveragedInputs, LeaderPlan, LowRank, RegionOwner, SharedIndices, capable, implements, leader_of,
    members, shared_of,
)
from sparsifiers.deft import DEFT
from sparsifiers.common.exchange_kinds import ExchangeKind
from sparsifiers.common.layout import Layout
from sparsifiers.topk import TopK

ROOT = Path(__file__).resolve().parents[1]
EXCHANGE_PACKAGE = ROOT / "experiments" / "engine" / "core" / "exchange"

# Who needs what, by hand: each capability implemented exactly by the methods that need it.
EXPECTED = {
    "dense": {"FixedMessages", "WireRounding"},  # the cluster model's fixed sizes; bf16/fp16 rounding
    "dense_overlap": {"FixedMessages", "WireRounding"},
    "dense_bf16": {"FixedMessages", "WireRounding"},
    "dense_fp16": {"FixedMessages", "WireRounding"},
    "powersgd": {"LowRank", "FixedMessages"},
    "cltk": {"LeaderPlan"},  # the leader's top-k indices
    "accordion": {"LeaderPlan"},  # rank 0's detection (no plan between detections: still a LeaderPlan)
    "deft": {"AveragedInputs", "LeaderPlan", "SharedIndices"},  # global norms, bins, common units
    "micro": {"AveragedInputs"},  # a calibrated threshold start
    "exdyna": {"AveragedInputs"},
    "oktopk": {"RegionOwner"},
}


def test_the_core_is_small():
    lines = len((ROOT / "sparsifiers" / "common" / "base.py").read_text().splitlines())
    assert lines <= 150, f"sparsifiers/common/base.py has {lines} lines: what not every method needs is a capability"


def test_the_core_has_no_capability_stubs():
    """No default no-op of a capability is left on the base class (nor a NotImplementedError)."""
    for protocol in CAPABILITIES:
        for name in members(protocol):
            assert not hasattr(Sparsifier, name), f"Sparsifier.{name} belongs to {protocol.__name__}"
    assert "NotImplementedError" not in (ROOT / "sparsifiers" / "common" / "base.py").read_text()


def test_each_capability_is_implemented_exactly_by_the_methods_that_need_it():
    assert set(EXPECTED) <= set(registry.names())
    for name in registry.names():
        assert set(registry.method(name).capabilities) == EXPECTED.get(name, set()), name


@pytest.mark.parametrize("name", registry.names())
def test_a_built_method_is_an_instance_of_exactly_its_capabilities(name):
    """isinstance against the runtime-checkable Protocols agrees with the class-level answer the
    step uses (`capable`)."""
    layout = Layout.from_shapes([("weight", (64, 32)), ("bias", (32,))])
    cfg = compose_job([f"sparsifier={name}", "workers=4", "dataset=synthetic", "model=mlp"])
    built = build_sparsifier(cfg, layout, rank=0)
    for protocol in CAPABILITIES:
        expected = protocol.__name__ in EXPECTED.get(name, set())
        assert isinstance(built, protocol) == expected == capable(built, protocol), (name, protocol.__name__)


def test_a_subclass_inherits_its_parents_capabilities_and_no_others():
    class QuieterTopK(TopK):
        pass

    class OwnDEFT(DEFT):
        pass

    assert not any(implements(QuieterTopK, protocol) for protocol in CAPABILITIES)
    assert [p for p in CAPABILITIES if implements(OwnDEFT, p)] == [AveragedInputs, LeaderPlan, SharedIndices]
    method = QuieterTopK(Layout.from_shapes([("w", (100,))]), 2, 0, density=0.1)
    assert leader_of(method, 3) is None and shared_of(method, 3) is None


def test_half_a_capability_is_refused():
    class HalfPlanned(TopK):
        def plan_leader(self, step: int) -> int:
            return 0

    with pytest.raises(TypeError, match="HalfPlanned defines plan_leader of LeaderPlan but not make_plan, plan_length"):
        capable(HalfPlanned(Layout.from_shapes([("w", (100,))]), 2, 0, density=0.1), LeaderPlan)


def test_an_exchange_that_needs_a_capability_says_so():
    layout = Layout.from_shapes([("w", (40,))])
    methods = [TopK(layout, 2, rank, density=0.1) for rank in range(2)]
    accs = [torch.randn(40) for _ in range(2)]
    selections = [torch.arange(4) for _ in range(2)]

    def request(**options) -> ExchangeRequest:
        return ExchangeRequest(selections, accs, torch.empty(40), RankCollectives(2, [0, 1], use_process_group=False),
                               **options)

    for kind, protocol in ((ExchangeKind.LOW_RANK, LowRank), (ExchangeKind.SPARSE_REDUCE_SCATTER, RegionOwner)):
        with pytest.raises(TypeError, match=f"{kind.value} needs a method implementing {protocol.__name__} "
                                            rf"\({', '.join(members(protocol))}; .*\): TopK does not"):
            exchange(kind, request(methods=methods))
        with pytest.raises(ValueError, match=f"{kind.value} needs the hosted ranks' sparsifiers"):
            exchange(kind, request())
    with pytest.raises(ValueError, match="leader_broadcast needs the leader rank"):
        exchange(ExchangeKind.LEADER_BROADCAST, request())


def test_every_exchange_kind_is_registered():
    assert set(EXCHANGES) == set(ExchangeKind)


def _imports(path: Path) -> tuple[list[str], list[str]]:
    """(module-level imports, imports inside a function or class) of a module."""
    tree = ast.parse(path.read_text())
    top = [node.module for node in tree.body if isinstance(node, ast.ImportFrom)]
    top += [alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names]
    nested = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
              and node not in tree.body]
    return top, [getattr(node, "module", None) or node.names[0].name for node in nested]


def test_the_exchange_package_has_no_import_cycle():
    """No module of the package imports the package's __init__ or hides an import in a function,
    and its modules' imports of each other form no cycle."""
    modules = sorted(path.stem for path in EXCHANGE_PACKAGE.glob("*.py") if path.stem != "__init__")
    assert set(modules) >= {"result", "index_set", "allgather", "tree", "dense", "regions"}
    edges = {}
    for module in modules:
        top, nested = _imports(EXCHANGE_PACKAGE / f"{module}.py")
        assert nested == [], f"exchange/{module}.py imports inside a function: {nested}"
        assert "experiments.engine.core.exchange" not in top, f"exchange/{module}.py imports the package's __init__"
        edges[module] = {name.rsplit(".", 1)[1] for name in top if name.startswith("experiments.engine.core.exchange.")}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import cycle: {' -> '.join((*path, module))}"
        if module not in done:
            for imported in edges[module]:
                visit(imported, (*path, module))
            done.add(module)

    for module in modules:
        visit(module, ())
    assert _imports(EXCHANGE_PACKAGE / "__init__.py")[1] == []
    assert not (ROOT / "experiments" / "engine" / "core" / "exchange.py").exists()
    assert not (ROOT / "experiments" / "engine" / "core" / "region_exchange.py").exists()


def test_the_capability_check_is_a_cached_class_lookup():
    """The step asks `capable` several times a step: after the first, a cache hit per call."""
    method = TopK(Layout.from_shapes([("w", (100,))]), 2, 0, density=0.1)
    capable(method, LeaderPlan)
    before = capabilities.implements.cache_info()
    for _ in range(10):
        capable(method, LeaderPlan)
    after = capabilities.implements.cache_info()
    assert (after.hits - before.hits, after.misses - before.misses) == (10, 0)
