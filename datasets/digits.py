"""scikit-learn's bundled handwritten digits: 1,797 real 8x8 images, shipped inside the wheel,
so tests and laptops get a real task with no download."""
from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import torch

from datasets.base import DatasetSplits, standardize


def bundled_digits() -> tuple[np.ndarray, np.ndarray]:
    """The images (1797 x 8 x 8, float64) and labels scikit-learn's load_digits returns, read
    from the file inside its wheel without importing scikit-learn: that import (scipy and more)
    took 1.4 s here, paid in run.py's preflight and again in every rank of every digits run.
    The same parse as load_digits: one CSV row per image, 64 pixels, then the label."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("dataset=digits reads scikit-learn's bundled digits: pip install scikit-learn")
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "digits.csv.gz"
    with gzip.open(path, "rt", encoding="utf-8") as rows:
        data = np.loadtxt(rows, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)


def load(test_fraction: float = 0.2, split_seed: int = 0) -> DatasetSplits:
    """Loads the digits as standardized float tensors (N x 1 x 8 x 8), split by a fixed seed."""
    pixels, target = bundled_digits()
    images = pixels.astype(np.float32)
    labels = target.astype(np.int64)
    order = np.random.default_rng(split_seed).permutation(len(labels))
    n_test = int(round(test_fraction * len(labels)))
    test, train = order[:n_test], order[n_test:]
    x = torch.from_numpy(images).unsqueeze(1)
    y = torch.from_numpy(labels)
    train_x, test_x = standardize(x[train], x[test])
    return DatasetSplits("digits", train_x, y[train], test_x, y[test], num_classes=10)
