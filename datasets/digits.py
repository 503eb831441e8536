"""scikit-learn's bundled handwritten digits: 1,797 real 8x8 images, shipped inside the wheel,
so tests and laptops get a real task with no download."""
from __future__ import annotations

import numpy as np
import torch

from datasets.base import DatasetSplits, standardize


def load(test_fraction: float = 0.2, split_seed: int = 0) -> DatasetSplits:
    """Loads the digits as standardized float tensors (N x 1 x 8 x 8), split by a fixed seed."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = bunch.images.astype(np.float32)
    labels = bunch.target.astype(np.int64)
    order = np.random.default_rng(split_seed).permutation(len(labels))
    n_test = int(round(test_fraction * len(labels)))
    test, train = order[:n_test], order[n_test:]
    x = torch.from_numpy(images).unsqueeze(1)
    y = torch.from_numpy(labels)
    train_x, test_x = standardize(x[train], x[test])
    return DatasetSplits("digits", train_x, y[train], test_x, y[test], num_classes=10)
