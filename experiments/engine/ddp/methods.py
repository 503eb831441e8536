"""Which sparsifier a hook runs, from plain Python: a method name or a `Sparsifier` class, plus knobs.

No conf/ file and no Hydra: an installed wheel has neither (conf/ is not a package), and a DDP
script should not need them. A name resolves to its class here, and its knobs to the class's
own defaults, with the few values where `conf/sparsifier/<name>.yaml` differs from them: the
dense presets' wire type and overlap, read from the registry's entry (its `precision` and
`overlap`, never restated here), and `PRESETS` for the rest. So `"deft"` runs what `run.py
sparsifier=deft` runs, and the knobs a hook records in its checkpoint are the ones the YAML node
would give. tests/test_ddp_methods.py holds every option of conf/sparsifier/ to that, so the two
cannot drift apart. The knobs pass run.py's own typed checks (experiments/runformat/knob_types.py):
a bad one fails with the line run.py would print.

A name resolves through the registry of methods (sparsifiers/registry.py), which imports a
class only when it is asked for (SIDCo's scipy, say, only when SIDCo runs).
"""
from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from experiments.runformat.errors import ConfigError
from experiments.runformat.knob_types import check_knobs, parameter_types
from sparsifiers import registry
from sparsifiers.common.base import Sparsifier
from sparsifiers.common.layout import Layout

# Where conf/sparsifier/<name>.yaml sets a knob other than the class's default and the registry
# does not hold it: a low-precision all-reduce keeps no residual (Dense refuses one), and
# PowerSGD's paper setting (the class keeps torch's defaults).
PRESETS: dict[str, dict[str, Any]] = {
    "dense_bf16": {"error_feedback": False},
    "dense_fp16": {"error_feedback": False},
    "powersgd": {"matrix_approximation_rank": 2, "start_iter": 2},
}
# The registry's traits that are knobs of the classes taking them (Dense's wire type and overlap).
REGISTRY_KNOBS = ("precision", "overlap")
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
        name, cls, preset = sparsifier, registry.method(sparsifier).cls, preset_of(sparsifier)
    elif inspect.isclass(sparsifier) and issubclass(sparsifier, Sparsifier):
        name, cls, preset = getattr(sparsifier, "name", sparsifier.__name__), sparsifier, {}
    else:
        raise ConfigError(f"sparsifier must be a method name or a Sparsifier subclass, got {type(sparsifier).__name__} "
                          "(a config node with a _target_ goes to register_sparsifier, from sparsebench's clone)")
    given = {**preset, **(knobs or {})}
    # run.py's check (names, types, ranges), with its messages, of what is set over the class's
    # own defaults (a user's class may default a float knob to None: not input to refuse).
    check_knobs("sparsifier", name, cls, given, RUNTIME_ARGUMENTS)
    return Method(name, cls, {**_defaults(cls), **given})


def preset_of(name: str) -> dict[str, Any]:
    """Where the YAML of registered method `name` departs from its class's defaults: the
    registry's traits the class takes as knobs (REGISTRY_KNOBS: the dense presets' precision and
    overlap), then PRESETS."""
    entry = registry.method(name)
    taken = parameter_types(entry.cls)
    return {**{key: getattr(entry, key) for key in REGISTRY_KNOBS if key in taken}, **PRESETS.get(name, {})}


def _defaults(cls: type[Sparsifier]) -> dict[str, Any]:
    """The defaults of the class's knobs (its constructor's, through the bases its **knobs
    forward to) in conf/sparsifier/'s spelling: an exchange left to the class is its first,
    tuples are lists, a density without default is `DENSITY`; a knob without one is the caller's."""
    defaults: dict[str, Any] = {}
    for key, (_, default) in parameter_types(cls).items():
        if key in RUNTIME_ARGUMENTS:
            continue
        default = DENSITY if key == "density" and default is inspect.Parameter.empty else default
        if default is not inspect.Parameter.empty:
            defaults[key] = list(default) if isinstance(default, tuple) else default
    if defaults.get("exchange", "") is None:
        defaults["exchange"] = cls.exchanges[0].value
    return defaults
