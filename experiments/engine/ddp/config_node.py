"""A sparsifier as a config node, for scripts run from sparsebench's clone: a name of
`conf/sparsifier/` or a node such as a Hydra config's `cfg.sparsifier`, plus knobs.

It reads the files `run.py` composes (`conf/sparsifier/<name>.yaml`) and checks the knobs with
run.py's validation (`check_group_knobs`): a mistyped knob or a value of the wrong type fails
with one line naming the key, before the hook is registered and before any collective runs.
So it needs the clone (conf/ is not a package, and the launcher's checks compose Hydra nodes):
the hook itself does not (methods.py, state.py); `register_sparsifier` imports this module only
when it is given a node.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from experiments.runformat.errors import ConfigError
from experiments.engine.launcher.compose import CONF_DIR
from experiments.engine.ddp.methods import Method
from experiments.engine.launcher.validate import check_group_knobs
from experiments.engine.rank.build import instantiate_node, knobs as node_knobs, target_of
from sparsifiers.common.base import Sparsifier
from sparsifiers.common.layout import Layout

GROUP = "sparsifier"


def sparsifier_names() -> list[str]:
    """The options of conf/sparsifier/, as `run.py sparsifier=<name>` knows them."""
    folder = CONF_DIR / GROUP
    if not folder.is_dir():  # conf/ is not a package: a non-editable install leaves it behind
        raise ConfigError(f"no {folder}: conf/ comes with sparsebench's clone (pip install -e <clone>); without it, "
                          "build the hook from a method name (SparsifierState, method_names()), which needs no conf/")
    return sorted(path.stem for path in folder.glob("*.yaml"))


def sparsifier_node(sparsifier: str | Mapping[str, Any] | DictConfig, knobs: Mapping[str, Any] | None = None) -> DictConfig:
    """The resolved node of `sparsifier` (a name like "deft", or a node with a `_target_`, e.g. a
    user's own `cfg.sparsifier`), with `knobs` set on it, checked like run.py checks it."""
    if isinstance(sparsifier, str):
        names = sparsifier_names()
        if sparsifier not in names:
            raise ConfigError(f"sparsifier={sparsifier} is not one of conf/sparsifier/: choose one of {', '.join(names)}")
        node = OmegaConf.load(CONF_DIR / GROUP / f"{sparsifier}.yaml")
    elif isinstance(sparsifier, (Mapping, DictConfig)):
        node = OmegaConf.create(OmegaConf.to_container(sparsifier, resolve=True) if isinstance(sparsifier, DictConfig) else dict(sparsifier))
        if "_target_" not in node:
            raise ConfigError(
                "a sparsifier config node needs a _target_ (e.g. sparsifiers.deft.DEFT): "
                "pass a conf/sparsifier/ name or a node such as cfg.sparsifier"
            )
        node._partial_ = True  # layout, world size, rank and seed are given by the hook
    else:
        raise ConfigError(f"sparsifier must be a conf/sparsifier/ name or a config node, got {type(sparsifier).__name__}")
    for key, value in (knobs or {}).items():
        if key.startswith("_") or key == "name":
            raise ConfigError(f"sparsifier.{key} is not a knob: set the method by name or by its node's _target_")
        node[key] = value
    check_group_knobs(GROUP, node)
    return node


def applies_momentum(node: DictConfig) -> bool:
    """Whether the node's method applies momentum itself (DGC's momentum correction): the
    user's optimizer must then have none."""
    return bool(getattr(target_of(node), "owns_momentum", False))


def method_of_node(node: DictConfig) -> Method:
    """The hook's `Method` of a checked node: its target and every knob the node sets."""
    target = target_of(node)
    return Method(node.get("name", getattr(target, "name", target.__name__)), target, node_knobs(node))


def build_sparsifier(node: DictConfig, layout: Layout, world_size: int, rank: int, seed: int) -> Sparsifier:
    """One rank's sparsifier from a checked node, as a rank process builds it (experiments/engine/rank/build.py)."""
    try:
        return instantiate_node(node, layout=layout, world_size=world_size, rank=rank, seed=seed)
    except ConfigError:
        raise
    except (TypeError, ValueError) as error:
        raise ConfigError(f"sparsifier={node.get('name', '?')}: {error}") from None
