"""Which sparsifier a hook runs, from plain Python: a method name or a `Sparsifier` class, plus knobs.

No conf/ file and no Hydra: an installed wheel has neither (conf/ is not a package), and a DDP
script should not need them. A name resolves to its class here, and its knobs to the class's
own defaults, with the few values where `conf/sparsifier/<name>.yaml` differs from them
(`PRESETS`): so `"deft"` runs what `run.py sparsifier=deft` runs, and the knobs a hook records in
its checkpoint are the ones the YAML node would give. tests/test_ddp_methods.py holds every
option of conf/sparsifier/ to that, so the two cannot drift apart.

A name resolves through the registry of methods (sparsifiers/registry.py), which imports a
class only when it is asked for (SIDCo's scipy, say, only when SIDCo runs).
"""
from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from experiments.runformat.errors import ConfigError
from sparsifiers import registry
from sparsifiers.common.base import Sparsifier
from sparsifiers.common.layout import Layout

# Where conf/sparsifier/<name>.yaml sets a knob other than the class's default: the dense
# presets' wire types, and PowerSGD's paper setting (the class keeps torch's defaults).
PRESETS: dict[str, dict[str, Any]] = {
    "dense_bf16": {"precision": "bf16", "error_feedback": False, "overlap": True},
    "dense_fp16": {"precision": "fp16", "error_feedback": False, "overlap": True},
    "dense_overlap": {"overlap": True},
    "powersgd": {"matrix_approximation_rank": 2, "start_iter": 2},
}
# conf/sparsifier/'s density for a class that has no default for it.
DENSITY = 0.01
# What the hook passes at build time: not knobs.
RUNTIME_ARGUMENTS = ("layout", "world_size", "rank", "seed")


@dataclass(frozen=True)
class Method:
    """A sparsifier class and every knob it is built with, checked by name."""

    name: str  # the option's name ("dense_bf16"), for messages
    cls: type[Sparsifier]
    knobs: dict[str, Any]

    @property
    def target(self) -> str:
        """The class's import path, as a config node's `_target_` names it."""
        return f"{self.cls.__module__}.{self.cls.__qualname__}"

    @property
    def owns_momentum(self) -> bool:
        """Whether it applies momentum itself (DGC's momentum correction): the user's optimizer
        must then have none."""
        return bool(getattr(self.cls, "owns_momentum", False))

    def build(self, layout: Layout, world_size: int, rank: int, seed: int) -> Sparsifier:
        """One rank's sparsifier, as a rank process builds it (the same class, the same knobs)."""
        try:
            return self.cls(layout=layout, world_size=world_size, rank=rank, seed=seed, **self.knobs)
        except ConfigError:
            raise
        except (TypeError, ValueError) as error:
            raise ConfigError(f"sparsifier={self.name}: {error}") from None


def method_names() -> list[str]:
    """The names a hook knows: the registry's, the options of conf/sparsifier/."""
    return sorted(registry.names())


def resolve(sparsifier: str | type[Sparsifier], knobs: Mapping[str, Any] | None = None) -> Method:
    """`sparsifier` (a name like "deft", or a `Sparsifier` subclass, your own included) with
    every knob: the class's defaults, the name's preset, then `knobs`. A knob the class does not
    take raises ConfigError naming it and listing the ones it takes."""
    if isinstance(sparsifier, str):
        if not registry.is_method(sparsifier):
            raise ConfigError(f"sparsifier={sparsifier} is not a sparsebench method: choose one of {', '.join(method_names())}, "
                              "or pass a Sparsifier subclass")
        name, cls, preset = sparsifier, registry.method(sparsifier).cls, PRESETS.get(sparsifier, {})
    elif inspect.isclass(sparsifier) and issubclass(sparsifier, Sparsifier):
        name, cls, preset = getattr(sparsifier, "name", sparsifier.__name__), sparsifier, {}
    else:
        raise ConfigError(f"sparsifier must be a method name or a Sparsifier subclass, got {type(sparsifier).__name__} "
                          "(a config node with a _target_ goes to register_sparsifier, from sparsebench's clone)")
    accepted, defaults, open_ended = _signature(cls)
    for key in knobs or {}:
        if key.startswith("_") or key == "name" or key in RUNTIME_ARGUMENTS or (key not in accepted and not open_ended):
            raise ConfigError(f"sparsifier.{key} is not a knob of sparsifier={name}; its knobs: {', '.join(accepted)}")
    return Method(name, cls, {**defaults, **preset, **(knobs or {})})


def _signature(cls: type[Sparsifier]) -> tuple[list[str], dict[str, Any], bool]:
    """The knobs of the class's constructor, through the bases its **knobs forward to; their
    defaults in conf/sparsifier/'s spelling (an exchange left to the class is its first, tuples
    are lists, a density without default is `DENSITY`); and whether a **kwargs nobody names is
    left (then any keyword goes)."""
    accepted: list[str] = []
    defaults: dict[str, Any] = {}
    for base in cls.__mro__:
        if "__init__" not in vars(base):
            continue
        parameters = list(inspect.signature(vars(base)["__init__"]).parameters.values())[1:]  # not self
        for p in parameters:
            if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) or p.name in accepted or p.name in RUNTIME_ARGUMENTS:
                continue
            accepted.append(p.name)
            default = DENSITY if p.name == "density" and p.default is p.empty else p.default
            if default is not p.empty:  # a knob without one is the caller's to give
                defaults[p.name] = list(default) if isinstance(default, tuple) else default
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    else:
        return accepted, _spelled(cls, defaults), True
    return accepted, _spelled(cls, defaults), False


def _spelled(cls: type[Sparsifier], defaults: dict[str, Any]) -> dict[str, Any]:
    if "exchange" in defaults and defaults["exchange"] is None:
        defaults["exchange"] = cls.exchanges[0].value
    return defaults
