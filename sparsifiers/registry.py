"""The methods sparsebench knows, by name, with the traits the rest of the code asks about.

One entry per `conf/sparsifier/<name>.yaml` (presets of one class, dense_bf16 or dense_overlap,
are entries of their own): the YAML's `name` is the entry's name and its `_target_` the entry's
class (tests/test_registry.py checks both ways). The analysis, the end-to-end study and the
benchmarks ask the registry (`names(thresholded=True)`, `method("deft").title`) instead of
keeping lists of names; a list of names that is a study's choice goes through `chosen`, which
checks it here.

What a class declares itself (`scope`, `exchanges`, `owns_momentum`) and the capabilities it
implements (`capabilities`, sparsifiers/common/capabilities.py) are read from the class, not restated.
The class is imported only when one of those is asked for, so the analysis, which never needs
them, does not load torch through this module.

The order is the figures' colour order (analysis/figures/style.py): append a new method at the end.
"""
from __future__ import annotations

import importlib
import inspect
import os
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from experiments.runformat.errors import ConfigError  # the bottom floor: imports nothing of sparsebench

if TYPE_CHECKING:
    from sparsifiers.common.base import SelectionScope, Sparsifier
    from sparsifiers.common.exchange_kinds import ExchangeKind


@dataclass(frozen=True)
class Method:
    """One selectable method and what it is."""

    name: str  # the option: run.py sparsifier=<name>, conf/sparsifier/<name>.yaml
    target: str  # the class its YAML's _target_ names
    title: str  # how prose and claims write it
    selects: bool = True  # False: it sends every coordinate (the dense baselines, PowerSGD's low rank)
    # Its density is set by a threshold steered toward the target (it logs sparsifier/threshold),
    # not by a count. Ok-Topk logs its local threshold too, but it stands for a top-k's count: not one.
    thresholded: bool = False
    # Its threshold carries over from step to step, moved by a rule toward the target (MiCRO's and
    # ExDyna's lambda, SAGE's rescaling): it needs steps to settle before its selection is typical.
    # A thresholded method whose threshold is fixed (hard threshold) or found afresh every step
    # (DGC's sample, Gaussian-k's fit, SIDCo's at its default fixed stages) is not steered.
    steered: bool = False
    partitioned: bool = False  # each rank selects in its own part of the vector: disjoint selections
    precision: str = "fp32"  # the dense presets' wire type (the YAML's `precision`)
    overlap: bool = False  # the cluster model overlaps its all-reduce with backward (the YAML's `overlap`)
    same_step_as: str | None = None  # another entry whose step it computes bit for bit (its runs serve both)

    @property
    def cls(self) -> type[Sparsifier]:
        module, _, attribute = self.target.rpartition(".")
        return getattr(importlib.import_module(module), attribute)

    @property
    def scope(self) -> SelectionScope:
        return self.cls.scope

    @property
    def split(self) -> bool:
        """The vector or the work is split among ranks (build-up 1 by construction)."""
        from sparsifiers.common.base import SelectionScope

        return self.scope is SelectionScope.SPLIT

    @property
    def exchanges(self) -> tuple[ExchangeKind, ...]:
        return self.cls.exchanges

    @property
    def capabilities(self) -> tuple[str, ...]:
        """The capabilities its class implements (sparsifiers/common/capabilities.py), by protocol name."""
        from sparsifiers.common.capabilities import CAPABILITIES, implements

        return tuple(protocol.__name__ for protocol in CAPABILITIES if implements(self.cls, protocol))

    @property
    def exchange(self) -> ExchangeKind:
        """The default exchange (the first the class supports)."""
        return self.exchanges[0]

    @property
    def calibrated_start(self) -> bool:
        """Its threshold can start calibrated (it has the `threshold_start` knob)."""
        return "threshold_start" in inspect.signature(self.cls).parameters

    @property
    def dense_baseline(self) -> bool:
        """What the sparsifiers are compared with: every method that does not select."""
        return not self.selects

    @property
    def needs_bf16(self) -> bool:
        """Runs only where the GPUs have bf16 (not on a V100)."""
        return self.precision == "bf16"


_DENSE = "sparsifiers.dense.Dense"
METHODS: tuple[Method, ...] = (
    Method("dense", _DENSE, "dense", selects=False),
    Method("dense_overlap", _DENSE, "dense (overlapped)", selects=False, overlap=True, same_step_as="dense"),
    Method("dense_bf16", _DENSE, "dense bf16", selects=False, precision="bf16", overlap=True),
    Method("dense_fp16", _DENSE, "dense fp16", selects=False, precision="fp16", overlap=True),
    Method("powersgd", "sparsifiers.powersgd.PowerSGD", "PowerSGD", selects=False),
    Method("topk", "sparsifiers.topk.TopK", "Top-k"),
    Method("dgc", "sparsifiers.dgc.DGC", "DGC", thresholded=True),
    Method("cltk", "sparsifiers.cltk.CLTK", "CLT-k"),
    Method("threshold", "sparsifiers.threshold.HardThreshold", "hard threshold", thresholded=True),
    Method("sage", "sparsifiers.sage.Sage", "SAGE", thresholded=True, steered=True),
    Method("gaussiank", "sparsifiers.gaussiank.GaussianK", "Gaussian-k", thresholded=True),
    Method("randomk", "sparsifiers.randomk.RandomK", "Random-k"),
    Method("micro", "sparsifiers.micro.Micro", "MiCRO", thresholded=True, steered=True, partitioned=True),
    Method("exdyna", "sparsifiers.exdyna.ExDyna", "ExDyna", thresholded=True, steered=True, partitioned=True),
    Method("deft", "sparsifiers.deft.DEFT", "DEFT", partitioned=True),
    Method("sidco", "sparsifiers.sidco.SIDCo", "SIDCo", thresholded=True),
    Method("accordion", "sparsifiers.accordion.Accordion", "Accordion"),
    Method("gtopk", "sparsifiers.gtopk.GTopK", "gTop-k"),
    Method("oktopk", "sparsifiers.oktopk.OkTopK", "Ok-Topk"),
)

# Methods whose files live outside this repository's sparsifiers/ (a test's fixtures, a user's
# method kept in a package of their own): SPARSEBENCH_METHODS names modules, comma-separated, each
# holding METHODS, a tuple of Method entries, appended after the registry's own. An environment
# variable because every process must see them alike: run.py's, its validation's and each rank's
# (torchrun starts fresh interpreters, which inherit the environment and nothing else). Their
# YAML is found through `hydra.searchpath` (docs/adding_a_sparsifier.md).
EXTRA_METHODS = "SPARSEBENCH_METHODS"


def _extra_methods(modules: str) -> tuple[Method, ...]:
    """The entries of the modules `modules` names; a name clash or a module without METHODS fails."""
    entries: list[Method] = []
    for module in filter(None, (part.strip() for part in modules.split(","))):
        try:
            found = importlib.import_module(module).METHODS
        except (ImportError, AttributeError) as error:
            raise ConfigError(f"{EXTRA_METHODS}={modules}: {module} must be an importable module holding METHODS, "
                              f"a tuple of sparsifiers.registry.Method entries ({error})") from None
        entries.extend(found)
    known = [entry.name for entry in (*METHODS, *entries)]
    clashes = sorted({name for name in known if known.count(name) > 1})
    if clashes:
        raise ConfigError(f"{EXTRA_METHODS}={modules} names methods twice: {', '.join(clashes)}: rename them")
    return tuple(entries)


METHODS = (*METHODS, *_extra_methods(os.environ.get(EXTRA_METHODS, "")))
_BY_NAME = {entry.name: entry for entry in METHODS}


def method(name: str) -> Method:
    """The entry of `name`; an unknown name fails naming the known ones."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ConfigError(f"sparsifier {name!r} is not a registered method (sparsifiers/registry.py); "
                          f"the known methods: {', '.join(_BY_NAME)}") from None


def is_method(name: str) -> bool:
    return name in _BY_NAME


def names(**traits: Any) -> tuple[str, ...]:
    """The names of the entries whose traits have the given values, in registry order:
    names(thresholded=True), names(selects=False), names(split=True)."""
    known = {field.name for field in fields(Method)} | {n for n, v in vars(Method).items() if isinstance(v, property)}
    for trait in traits:
        if trait not in known:
            raise TypeError(f"{trait} is not a trait of a registered method; the traits: {', '.join(sorted(known))}")
    return tuple(entry.name for entry in METHODS
                 if all(getattr(entry, trait) == value for trait, value in traits.items()))


def chosen(*picked: str) -> tuple[str, ...]:
    """A study's or a figure's own choice of methods (not a trait of theirs), checked here:
    `METHODS = chosen("topk", "deft")` fails at import when a name is not registered."""
    for name in picked:
        method(name)
    return picked
