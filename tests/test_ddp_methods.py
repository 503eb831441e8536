"""The hook's methods without conf/ (experiments/engine/ddp/methods.py) against conf/sparsifier/.

A method name must resolve to the class and every knob its conf/sparsifier/ file gives, value
and type, so that the hook from an installed wheel runs what `run.py sparsifier=<name>` runs and
records the same knobs in its checkpoints as a hook built from the YAML node. And importing the
hook must not import what needs the clone: Hydra, the launcher, the rank process.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest
import yaml

from experiments.engine.ddp.methods import method_names, resolve
from experiments.runformat.errors import ConfigError
from sparsifiers import registry
from sparsifiers.common.layout import Layout
from sparsifiers.topk import TopK
from tests.conftest import REPO

CONF = REPO / "conf" / "sparsifier"


def typed(knobs: dict) -> dict:
    """Values with their types: 1 and 1.0, or a list and a tuple, must not pass for each other."""
    return {key: (type(value).__name__, value) for key, value in knobs.items()}


def test_the_names_are_the_options_of_conf_sparsifier():
    assert method_names() == sorted(path.stem for path in CONF.glob("*.yaml"))


@pytest.mark.parametrize("name", sorted(path.stem for path in CONF.glob("*.yaml")))
def test_a_name_resolves_to_its_yaml_node(name):
    node = yaml.safe_load((CONF / f"{name}.yaml").read_text())
    method = resolve(name)
    assert method.target == node["_target_"]
    assert typed(method.knobs) == typed({k: v for k, v in node.items() if not k.startswith("_") and k != "name"})


DENSE_PRESETS = [name for name in registry.names(selects=False) if registry.method(name).target == "sparsifiers.dense.Dense"]


@pytest.mark.parametrize("name", DENSE_PRESETS)
def test_a_dense_presets_precision_and_overlap_come_from_the_registry(name, monkeypatch):
    """One place for the fact: the hook reads the registry's entry, so changing it changes the
    hook (ac091f3 kept a copy in methods.PRESETS, which a changed entry left behind)."""
    entry = registry.method(name)
    assert {key: resolve(name).knobs[key] for key in ("precision", "overlap")} == \
        {"precision": entry.precision, "overlap": entry.overlap}
    changed = dataclasses.replace(entry, precision="fp32" if entry.precision != "fp32" else "bf16",
                                  overlap=not entry.overlap)
    monkeypatch.setitem(registry._BY_NAME, name, changed)
    knobs = resolve(name).knobs
    assert (knobs["precision"], knobs["overlap"]) == (changed.precision, changed.overlap)


def test_knobs_override_the_defaults():
    method = resolve("micro", {"density": 0.001, "threshold_rule": "symmetric"})
    assert method.knobs["density"] == 0.001 and method.knobs["threshold_rule"] == "symmetric"
    assert method.knobs["comparison"] == "released"


def test_an_unknown_name_lists_the_methods():
    with pytest.raises(ConfigError, match="sparsifier=dfet is not a sparsebench method: choose one of .*deft"):
        resolve("dfet")


def test_a_mistyped_knob_names_the_knob_and_the_known_ones():
    with pytest.raises(ConfigError, match=r"sparsifier\.densty is not a knob of sparsifier=deft; its knobs: density"):
        resolve("deft", {"densty": 0.1})
    with pytest.raises(ConfigError, match=r"sparsifier\.rank is not a knob"):  # the hook passes it
        resolve("deft", {"rank": 1})


def test_a_bad_value_of_the_right_type_fails_as_a_config_error_naming_the_method():
    """A value the class itself refuses (an unknown threshold rule) fails when built, naming the method."""
    method = resolve("micro", {"threshold_rule": "sideways"})
    with pytest.raises(ConfigError, match="sparsifier=micro|sparsifier.threshold_rule"):
        method.build(Layout.from_shapes([("w", (100,))]), 1, 0, 0)


class HalfTopK(TopK):
    """A user's own method: a subclass with a knob of its own."""

    name = "half_topk"

    def __init__(self, *args, scale: float = 0.5, **knobs) -> None:
        super().__init__(*args, **knobs)
        self.scale = scale


def test_a_users_own_sparsifier_class_takes_its_knobs_and_its_bases():
    method = resolve(HalfTopK, {"scale": 0.25})
    assert method.name == "half_topk" and method.knobs["scale"] == 0.25
    assert method.knobs["exchange"] == "union_allreduce" and method.knobs["density"] == 0.01
    built = method.build(Layout.from_shapes([("w", (1000,))]), 2, 1, 0)
    assert isinstance(built, HalfTopK) and built.k == 10 and built.scale == 0.25


def test_importing_the_hook_needs_no_clone_machinery():
    """What an installed wheel imports to use the hook: no Hydra, no launcher, no rank process."""
    code = ("import sys; import experiments.engine.ddp; "
            "print(sorted(m for m in sys.modules if m.startswith(('hydra', 'experiments.engine.launcher', 'experiments.engine.rank', "
            "'experiments.engine.ddp.config_node'))))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"
