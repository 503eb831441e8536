"""The one place that calls `hydra.utils.instantiate`: config groups -> objects.

Group nodes carry a `name` (which option this is) beside the target's knobs; `name` is metadata
and is dropped before the call. Each builder declares (`passes`) the arguments it supplies at
build time, which are not knobs a user sets: validation refuses them as knobs (validate.py).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch
from hydra.errors import InstantiationException
from hydra.utils import get_object, instantiate
from omegaconf import DictConfig, OmegaConf

from datasets.base import TaskData
from experiments.runformat.errors import ConfigError
from experiments.engine.rank.optimizers import parameter_groups
from experiments.engine.rank.schedule import StepSchedule
from sparsifiers import registry
from sparsifiers.common.base import Sparsifier
from sparsifiers.common.layout import Layout

METADATA_KEYS = ("name",)
# group -> the arguments its builder passes (declared on the builder by `passes`).
RUNTIME_ARGUMENTS: dict[str, frozenset[str]] = {"dataset": frozenset(), "schedule": frozenset()}
# Every argument a task's data can give a model (`TaskData.model_inputs()` in datasets/base.py);
# a model takes the subset its task provides.
MODEL_INPUTS = ("input_shape", "num_classes", "vocab_size", "num_users", "num_items")

Builder = TypeVar("Builder", bound=Callable[..., Any])


def passes(group: str, *arguments: str) -> Callable[[Builder], Builder]:
    """Declares the arguments the decorated builder passes to the target of `group`."""
    def declare(builder: Builder) -> Builder:
        RUNTIME_ARGUMENTS[group] = frozenset(arguments)
        return builder
    return declare


def knobs(node: DictConfig) -> dict[str, Any]:
    """The arguments a group node passes to its target (no `_target_`, `_partial_`, `name`)."""
    values = OmegaConf.to_container(node, resolve=True)
    return {key: value for key, value in values.items() if not key.startswith("_") and key not in METADATA_KEYS}


def target_of(node: DictConfig) -> Any:
    """The class or function a group node builds."""
    return get_object(node._target_)


def instantiate_node(node: DictConfig, *args: Any, **kwargs: Any) -> Any:
    config = OmegaConf.create({"_target_": node._target_, **knobs(node)})
    partial = bool(node.get("_partial_", False))
    try:
        built = instantiate(config, _partial_=partial, _convert_="all")
    except InstantiationException as error:
        # Hydra wraps the target's own error (a ValueError naming the knob): raise that one.
        raise (error.__cause__ or error) from None
    return built(*args, **kwargs) if partial else built


def build_dataset(cfg: DictConfig) -> TaskData:
    return instantiate_node(cfg.dataset)


def build_model(cfg: DictConfig, data: TaskData) -> torch.nn.Module:
    return build_model_for(cfg, data.model_inputs())


@passes("model", *MODEL_INPUTS)
def build_model_for(cfg: DictConfig, inputs: dict[str, Any]) -> torch.nn.Module:
    """The model from its config and what the data tells it (`TaskData.model_inputs()`: shapes,
    classes, vocabulary, users and items), so that no config repeats a dataset's sizes."""
    return instantiate_node(cfg.model, **inputs)


@passes("optimizer", "params")  # parameter_groups(model), torch.optim's first argument
def build_optimizer(cfg: DictConfig, model: torch.nn.Module, sparsifier: Sparsifier) -> torch.optim.Optimizer:
    """The optimizer for the aggregated gradient, over `parameter_groups(model)` (BatchNorm
    parameters marked, for optimizers that decay them differently). A sparsifier that owns
    momentum (DGC) gets an optimizer without it, so momentum is applied once (see summary.json's
    `optimizer`)."""
    return instantiate_node(optimizer_node(cfg, sparsifier.owns_momentum), parameter_groups(model))


def optimizer_node(cfg: DictConfig, owns_momentum: bool) -> DictConfig:
    """cfg's optimizer node as build_optimizer builds it: without momentum for a method that owns it."""
    node = cfg.optimizer
    if owns_momentum and node.get("momentum"):
        node = OmegaConf.merge(node, {"momentum": 0.0})
    return node


def build_schedule(cfg: DictConfig, optimizer: torch.optim.Optimizer) -> StepSchedule:
    """The learning-rate schedule, bound to the optimizer's base lr, the batch and W."""
    return instantiate_node(cfg.schedule).bind(optimizer, cfg.batch_size, cfg.workers)


@passes("sparsifier", "layout", "world_size", "rank", "seed")
def build_sparsifier(cfg: DictConfig, layout: Layout, rank: int) -> Sparsifier:
    """The node's `name` resolves through the registry (sparsifiers/registry.py): its `_target_`
    must build that method's class, or one derived from it (tests inject faults that way)."""
    entry = registry.method(str(cfg.sparsifier.get("name")))
    if not issubclass(target_of(cfg.sparsifier), entry.cls):
        raise ConfigError(f"sparsifier._target_={cfg.sparsifier._target_} is not {entry.name}'s class "
                          f"({entry.target}), nor derived from it: set sparsifier=<name> to choose another method")
    return instantiate_node(cfg.sparsifier, layout=layout, world_size=cfg.workers, rank=rank, seed=cfg.seed)
