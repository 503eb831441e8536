"""The one place that calls `hydra.utils.instantiate`: config groups -> objects.

Group nodes carry a `name` (which option this is) beside the target's knobs; `name` is metadata
and is dropped before the call.
"""
from __future__ import annotations

from typing import Any

import torch
from hydra.utils import get_object, instantiate
from omegaconf import DictConfig, OmegaConf

from datasets.base import DatasetSplits
from sparsifiers.base import Sparsifier
from sparsifiers.layout import Layout

METADATA_KEYS = ("name",)


def knobs(node: DictConfig) -> dict[str, Any]:
    """The arguments a group node passes to its target (no `_target_`, `_partial_`, `name`)."""
    values = OmegaConf.to_container(node, resolve=True)
    return {key: value for key, value in values.items() if not key.startswith("_") and key not in METADATA_KEYS}


def target_of(node: DictConfig) -> Any:
    """The class or function a group node builds."""
    return get_object(node._target_)


def _instantiate(node: DictConfig, *args: Any, **kwargs: Any) -> Any:
    config = OmegaConf.create({"_target_": node._target_, **knobs(node)})
    partial = bool(node.get("_partial_", False))
    built = instantiate(config, _partial_=partial, _convert_="all")
    return built(*args, **kwargs) if partial else built


def build_dataset(cfg: DictConfig) -> DatasetSplits:
    return _instantiate(cfg.dataset)


def build_model(cfg: DictConfig, data: DatasetSplits) -> torch.nn.Module:
    return _instantiate(cfg.model, input_shape=data.input_shape, num_classes=data.num_classes)


def build_optimizer(cfg: DictConfig, parameters, sparsifier: Sparsifier) -> torch.optim.Optimizer:
    """The optimizer for the aggregated gradient. A sparsifier that owns momentum (DGC) gets an
    optimizer without it, so momentum is applied once (see summary.json's `optimizer`)."""
    node = cfg.optimizer
    if sparsifier.owns_momentum and node.get("momentum"):
        node = OmegaConf.merge(node, {"momentum": 0.0})
    return _instantiate(node, parameters)


def build_sparsifier(cfg: DictConfig, layout: Layout, rank: int) -> Sparsifier:
    return _instantiate(cfg.sparsifier, layout=layout, world_size=cfg.workers, rank=rank, seed=cfg.seed)
