"""The method registry (sparsifiers/registry.py): it and conf/sparsifier/ name the same methods,
what a class declares is not restated, and no list of method names grows back outside it."""
from __future__ import annotations

import ast
import os
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from experiments.runformat.errors import ConfigError
from experiments.engine.rank.build import build_sparsifier
from sparsifiers import registry
from sparsifiers.common.layout import Layout

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf" / "sparsifier"
SCANNED = ("sparsifiers", "experiments", "analysis")
REGISTRY = ROOT / "sparsifiers" / "registry.py"


def _conf() -> dict[str, dict]:
    return {path.stem: yaml.safe_load(path.read_text()) for path in sorted(CONF.glob("*.yaml"))}


def test_every_config_names_a_registry_entry_and_every_entry_has_a_config():
    conf = _conf()
    assert sorted(conf) == sorted(registry.names())
    for stem, node in conf.items():
        entry = registry.method(node["name"])
        assert node["name"] == stem, f"conf/sparsifier/{stem}.yaml names {node['name']}"
        assert node["_target_"] == entry.target, f"conf/sparsifier/{stem}.yaml builds {node['_target_']}, the registry {entry.target}"


def test_the_dense_presets_wire_type_and_overlap_are_the_registrys():
    for stem, node in _conf().items():
        entry = registry.method(stem)
        assert node.get("precision", "fp32") == entry.precision, stem
        assert node.get("overlap", False) == entry.overlap, stem


def test_each_class_is_named_by_its_own_entry_and_its_presets_run_its_step():
    for entry in registry.METHODS:
        own = registry.method(entry.cls.name)
        assert own.target == entry.target, f"{entry.name}: {entry.target}.name is {entry.cls.name}, an entry of another class"
        if entry.same_step_as is not None:
            assert registry.method(entry.same_step_as).target == entry.target


def test_partitioned_methods_are_split_and_dense_baselines_select_nothing():
    assert set(registry.names(partitioned=True)) <= set(registry.names(split=True))
    assert set(registry.names(selects=False)) == set(registry.names(dense_baseline=True))
    assert registry.names(needs_bf16=True) == ("dense_bf16",)


def _cfg(name: str, target: str):
    return OmegaConf.create({"workers": 2, "seed": 0,
                             "sparsifier": {"_target_": target, "_partial_": True, "name": name, "density": 0.1}})


def test_the_build_resolves_the_name_in_the_registry():
    layout = Layout.from_shapes([("w", (100,))])
    assert type(build_sparsifier(_cfg("topk", "sparsifiers.topk.TopK"), layout, rank=0)).__name__ == "TopK"
    assert build_sparsifier(_cfg("topk", "tests.helpers.fault_injection.CrashingTopK"), layout, rank=0).name == "topk"
    with pytest.raises(ConfigError, match="not a registered method"):
        build_sparsifier(_cfg("mine", "sparsifiers.topk.TopK"), layout, rank=0)
    with pytest.raises(ConfigError, match="not topk's class"):
        build_sparsifier(_cfg("topk", "sparsifiers.sage.Sage"), layout, rank=0)


def test_thresholded_methods_log_their_threshold():
    for name in registry.names(thresholded=True):
        assert "keys.THRESHOLD:" in inspect.getsource(registry.method(name).cls), name


def test_an_unknown_name_or_trait_fails_naming_what_is_known():
    with pytest.raises(ConfigError, match="not a registered method.*topk"):
        registry.method("top_k")
    with pytest.raises(ConfigError, match="top_k"):
        registry.chosen("topk", "top_k")
    with pytest.raises(TypeError, match="thresholded"):
        registry.names(thresholdd=True)


def test_asking_for_a_trait_the_registry_holds_loads_no_torch():
    """The analysis asks the registry about methods; it must not load torch for it."""
    code = ("import sys; from sparsifiers import registry; registry.names(thresholded=True); "
            "registry.method('deft').title; assert 'torch' not in sys.modules, 'torch loaded'")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


COMMA_LIST = re.compile(r"\w+(,\w+)+")  # "topk,deft": a command-line default


def name_lists(source: str) -> list[tuple[int, list[str]]]:
    """(line, names) of every tuple, list or set literal, every call's arguments and every comma
    list ("topk,deft") holding two or more method names; a call of `chosen` (a study's checked
    choice) is not one, nor a Hydra override ("sparsifier=topk,deft": a command line, which Hydra
    checks against conf/sparsifier/ as it composes)."""
    known = set(registry.names())
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = [item.value for item in node.elts if isinstance(item, ast.Constant)]
        elif isinstance(node, ast.Call):
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            items = [] if callee == "chosen" else [item.value for item in node.args if isinstance(item, ast.Constant)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and COMMA_LIST.fullmatch(node.value):
            items = node.value.split(",")
        else:
            continue
        methods = [item for item in items if isinstance(item, str) and item in known]
        if len(methods) >= 2:
            found.append((node.lineno, methods))
    return sorted(found)


def test_the_detector_sees_lists_and_calls_and_lets_a_checked_choice_pass():
    source = ('A = ("micro", "exdyna")\nif m in ["deft", "topk", "x"]: pass\nf("dgc", "sage")\nD = "topk,deft"\n'
              'B = chosen("topk", "cltk")\nC = ("micro", "MiCRO")\nE = "sparsifier=topk,deft"\nF = "topk, as deft"\n')
    assert [line for line, _ in name_lists(source)] == [1, 2, 3, 4]


def test_no_list_of_method_names_outside_the_registry():
    """A trait belongs in sparsifiers/registry.py (ask `registry.names(...)`); a study's own
    choice of methods goes through `registry.chosen(...)`, which checks the names."""
    offenders = []
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if path == REGISTRY:
                continue
            offenders += [f"{path.relative_to(ROOT)}:{line}: {', '.join(names)}" for line, names in name_lists(path.read_text())]
    assert offenders == [], "lists of method names outside sparsifiers/registry.py:\n" + "\n".join(offenders)


def test_methods_kept_outside_sparsifiers_are_registered_in_every_process_through_the_environment(tmp_path):
    """SPARSEBENCH_METHODS adds a module's METHODS after the registry's own, in a fresh interpreter
    (as run.py's and each rank's are); the worked example and the cheater are registered only so."""
    from tests.helpers import fixture_methods

    assert not registry.is_method("partitioned_topk") and not registry.is_method("top2k")
    env = {**os.environ, registry.EXTRA_METHODS: fixture_methods.__name__}
    shown = subprocess.run([sys.executable, "-c", "from sparsifiers import registry; m = registry.method('partitioned_topk'); "
                            "print(registry.names()[-2:], m.split, m.cls.__module__)"],
                           cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout
    assert shown.strip() == "('partitioned_topk', 'top2k') True tests.helpers.partitioned_topk"
    with pytest.raises(ConfigError, match="names methods twice: partitioned_topk, top2k: rename them"):
        registry._extra_methods(f"{fixture_methods.__name__},{fixture_methods.__name__}")
    with pytest.raises(ConfigError, match="SPARSEBENCH_METHODS=no_such_module: no_such_module must be an importable module"):
        registry._extra_methods("no_such_module")
    with fixture_methods.registered(tmp_path) as search:  # and in this process, for a `with`
        assert registry.method("top2k").title == "top-2k (cheats)" and search == f"hydra.searchpath=[file://{tmp_path}]"
        assert yaml.safe_load((tmp_path / "sparsifier" / "partitioned_topk.yaml").read_text())["_target_"] == \
            "tests.helpers.partitioned_topk.PartitionedTopK"
    assert not registry.is_method("top2k")


# The knobs that keep a thresholded method's history out of the final step's input: DGC's momentum
# (its velocity would carry the history into acc) and warm-up (a schedule by epoch, not a threshold).
HISTORY_FREE_INPUT = {"dgc": {"momentum": 0.0, "warmup": False}}


def _threshold_after(name: str, history_scale: float) -> float:
    """Rank 0's logged threshold at a last step whose input is the same whatever came before (the
    residuals zeroed, the same gradients), after 6 steps of gradients scaled by `history_scale`."""
    from tests.helpers.stepped_ranks import SteppedRanks, noise

    layout = Layout.from_shapes([("a", (3000,)), ("b", (1000,))])
    knobs = {**_conf()[name], "density": 0.01, **HISTORY_FREE_INPUT.get(name, {})}
    cfg = OmegaConf.create({"workers": 2, "seed": 0, "sparsifier": knobs})
    world = SteppedRanks([build_sparsifier(cfg, layout, rank=rank) for rank in range(2)])
    history = noise(layout.numel, 2, seed=1, scale=history_scale)
    for step in range(6):
        world.step(next(history), step)
    for residual in world.residuals:
        residual.zero_()
    world.step(next(noise(layout.numel, 2, seed=2)), 6)
    return float(world.sparsifiers[0].metrics()["sparsifier/threshold"])


@pytest.mark.parametrize("name", registry.names(thresholded=True))
def test_a_steered_threshold_carries_its_history_and_no_other_does(name):
    """`steered` decides how long the compare battery's selection replay settles a method
    (experiments/studies/compare/battery.py): a steered threshold is moved from step to step, so
    after histories far below and far above the target the same last step sees different
    thresholds; every other thresholded method's is fixed or found afresh from that step's input."""
    below, above = _threshold_after(name, 1e-4), _threshold_after(name, 1e4)
    assert (below != above) == registry.method(name).steered, (name, below, above)
    assert set(registry.names(steered=True)) <= set(registry.names(thresholded=True))
