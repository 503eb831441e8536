"""Types and ranges of the knobs of group nodes (sparsifier, model, dataset, optimizer, schedule).

Applied by run.py's validation (experiments/engine/launcher/validate.py) and by the DDP hook
(experiments/engine/ddp/methods.py), so a bad knob fails with the same line in both; here, on the
bottom floor (standard library only), because the hook ships in a wheel without the launcher.

Group nodes are built by `_target_`, so the schema cannot type their knobs. The target's own
signature can: each knob is checked against the parameter's annotation (or, where there is none,
the type of its default), so that `sparsifier.density=abc` or `sparsifier.error_feedback=maybe`
fails before launch naming the key, instead of deep inside a constructor in every rank. Ranges
are declared once in `RANGES` (by knob name, for every option of a group that has the knob);
the targets' own checks stay where they are and still run when validation builds them.
"""
from __future__ import annotations

import collections.abc
import inspect
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, Collection, Mapping

from experiments.runformat.errors import ConfigError, require


@dataclass(frozen=True)
class Range:
    """An interval; `None` leaves a side open-ended. Applied to every number of a list knob."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False  # True: low itself is excluded
    high_open: bool = False

    def holds(self, value: float) -> bool:
        above = self.low is None or (value > self.low if self.low_open else value >= self.low)
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return above and below

    def describe(self) -> str:
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        if self.low is None:
            return f"{'<' if self.high_open else '<='} {self.high:g}"
        return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"


POSITIVE = Range(1)  # counts and sizes: at least one
NON_NEGATIVE = Range(0)
FRACTION = Range(0, 1, low_open=True, high_open=True)
PROBABILITY = Range(0, 1, high_open=True)  # dropout: 1 would drop everything
# `group.knob` -> its range, for whichever option of the group has that knob (the sparsifiers
# range their own knobs, sparsifier.density included, in their constructors).
RANGES: dict[str, Range] = {
    "optimizer.lr": NON_NEGATIVE,
    "optimizer.momentum": PROBABILITY,
    "optimizer.weight_decay": NON_NEGATIVE,
    "optimizer.norm_weight_decay": NON_NEGATIVE,
    "model.hidden": POSITIVE,
    "model.depth": NON_NEGATIVE,  # 0: a linear classifier
    "model.width": POSITIVE,
    "model.layers": POSITIVE,
    "model.factors": POSITIVE,
    "model.reduction": POSITIVE,
    "model.mlp_layers": POSITIVE,
    "model.dropout": PROBABILITY,
    "dataset.num_train": POSITIVE,
    "dataset.num_test": POSITIVE,
    "dataset.num_classes": Range(2),  # one class is nothing to learn
    "dataset.channels": POSITIVE,
    "dataset.image_size": POSITIVE,
    "dataset.noise": NON_NEGATIVE,
    "dataset.test_fraction": FRACTION,
    "dataset.seed": NON_NEGATIVE,
    "dataset.split_seed": NON_NEGATIVE,
    "dataset.stand_in_seed": NON_NEGATIVE,
    "schedule.milestones": NON_NEGATIVE,
    "schedule.decay_factor": Range(0, low_open=True),
    "schedule.warmup_epochs": NON_NEGATIVE,
    "schedule.warmup_reference_batch": POSITIVE,
}


def _signature_walk(target: Any) -> tuple[dict[str, tuple[Any, Any]], bool]:
    """The one walk over a target's signature: name -> (annotation, default) of a function's or
    class's named parameters (a class's `self` left out); for a class whose __init__ forwards
    **kwargs to its base, the base's parameters too. The flag says whether a **kwargs is left
    that nobody names (then any keyword goes). Missing annotations are `inspect.Parameter.empty`."""
    is_class = inspect.isclass(target)
    functions = [target] if not is_class else [vars(c)["__init__"] for c in target.__mro__ if "__init__" in vars(c)]
    found: dict[str, tuple[Any, Any]] = {}
    for function in functions:
        try:
            hints = typing.get_type_hints(function)
        except Exception:  # an annotation that does not resolve: fall back to the defaults
            hints = {}
        parameters = list(inspect.signature(function).parameters.values())[1 if is_class else 0:]
        for p in parameters:
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name not in found:
                found[p.name] = (hints.get(p.name, p.annotation), p.default)
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            return found, False
    return found, True


def parameter_types(target: Any) -> dict[str, tuple[Any, Any]]:
    """name -> (annotation, default) of the target's named parameters (`_signature_walk`)."""
    return _signature_walk(target)[0]


def accepted_parameters(target: Any) -> list[str] | None:
    """The target's named parameters, in order; None if anything goes (a **kwargs nobody names)."""
    found, open_ended = _signature_walk(target)
    return None if open_ended else list(found)


def _matches(value: Any, annotation: Any) -> bool:
    """Whether a config value (int, float, bool, str, None, list) fits a type annotation."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any or annotation is inspect.Parameter.empty:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in args)
    if annotation is type(None) or annotation is None:
        return value is None
    if annotation is bool:
        return isinstance(value, bool)  # not 1, not "yes": true or false only
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if origin in (list, tuple, collections.abc.Sequence) or annotation in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return False
        element_types = [arg for arg in args if arg is not Ellipsis] or [Any]
        return all(any(_matches(item, t) for t in element_types) for item in value)
    if isinstance(annotation, type):
        # torch.Tensor (SGD's lr: float | Tensor) never comes from a config file: no match.
        return isinstance(value, annotation) and _is_config_type(annotation)
    return True  # a typing construct this check does not model: the target decides


def _is_config_type(annotation: type) -> bool:
    """Types a config value can be; others (torch.Tensor) never come from a config file."""
    return annotation in (bool, int, float, str, list, tuple, dict)


def _checkable(annotation: Any) -> bool:
    """Whether the annotation names a type a config value can have (else the target decides)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_checkable(arg) for arg in args if arg is not type(None))
    return origin in (list, tuple, collections.abc.Sequence) or (isinstance(annotation, type) and _is_config_type(annotation))


def _describe(annotation: Any, default: Any) -> str:
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string", type(None): "null"}
    if annotation is inspect.Parameter.empty:
        annotation = type(default)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        kinds = [_describe(arg, default) for arg in args if _is_config_type(arg) or arg is type(None) or typing.get_origin(arg) is not None]
        return " or ".join(dict.fromkeys(kinds))  # list[float] | tuple[float, ...]: said once
    if origin in (list, tuple, collections.abc.Sequence):
        inner = [arg for arg in args if arg is not Ellipsis]
        return f"a list of {_describe(inner[0], None).removeprefix('a ').removeprefix('an ')}s" if inner else "a list"
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def check_finite(key: str, value: Any) -> None:
    """The one rule for NaN and infinity: no knob of sparsebench means them (an `inf` learning
    rate turns every parameter into NaN in the first update, and the run would fail later,
    blaming something else). Lists are checked entry by entry."""
    for number in value if isinstance(value, (list, tuple)) else [value]:
        if isinstance(number, float) and not math.isfinite(number):
            raise ConfigError(f"{key} must be a finite number, got {number}: set {key} to a finite value")


def check_knob(group: str, key: str, value: Any, annotation: Any, default: Any) -> None:
    """Raises ConfigError naming `group.key` when its value is not finite, or has the wrong type
    or range."""
    check_finite(f"{group}.{key}", value)
    if annotation is inspect.Parameter.empty and default is not inspect.Parameter.empty and default is not None:
        annotation = float if type(default) is int and isinstance(value, float) else type(default)
    if _checkable(annotation) and not _matches(value, annotation):
        raise ConfigError(f"{group}.{key} must be {_describe(annotation, default)}, got {value!r}{_example(group, key, default)}")
    bounds = RANGES.get(f"{group}.{key}")
    numbers = value if isinstance(value, (list, tuple)) else [value]
    if bounds is not None:
        for number in numbers:
            if isinstance(number, (int, float)) and not isinstance(number, bool) and not bounds.holds(number):
                what = f"every entry of {group}.{key}" if isinstance(value, (list, tuple)) else f"{group}.{key}"
                raise ConfigError(f"{what} must be {bounds.describe()}, got {value}{_example(group, key, default)}")


def _example(group: str, key: str, default: Any) -> str:
    """`: set e.g. group.key=<the target's default>`, where the target has one."""
    if default is inspect.Parameter.empty or default is None:
        return ""
    if isinstance(default, bool):
        text = str(default).lower()
    elif isinstance(default, (list, tuple)):
        text = "[" + ",".join(str(item) for item in default) + "]"
    else:
        text = str(default)
    return f": set e.g. {group}.{key}={text}"


def check_knob_types(group: str, target: Any, values: dict[str, Any]) -> None:
    """Checks every knob of one group node against its target's signature and `RANGES`."""
    declared = parameter_types(target)
    for key, value in values.items():
        annotation, default = declared.get(key, (inspect.Parameter.empty, inspect.Parameter.empty))
        check_knob(group, key, value, annotation, default)


def check_knobs(group: str, name: str, target: Any, values: Mapping[str, Any], passed: Collection[str] = ()) -> None:
    """The whole check of one group node's knobs (`name`: its option, for messages): each is a
    named parameter of `target` (`passed`: those its builder passes, which are no knobs; a key
    starting with `_`, and `name`, never are), then of its type and range (check_knob_types)."""
    accepted = accepted_parameters(target)
    known = None if accepted is None else [key for key in accepted if key not in passed]
    for key in values:
        unknown = key.startswith("_") or key == "name" or key in passed or (known is not None and key not in known)
        require(not unknown, f"{group}.{key} is not a knob of {group}={name}; its knobs: {', '.join(known or accepted or ())}")
    check_knob_types(group, target, dict(values))
