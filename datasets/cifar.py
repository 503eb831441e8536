"""CIFAR-10 and CIFAR-100 (Krizhevsky, 2009): 50,000 + 10,000 colour 32x32 images of 10 or 100
classes, read from the python-pickle release.

Files: `cifar-10-batches-py/` {data_batch_1..5, test_batch}, or `cifar-100-python/` {train, test}
(fine labels), each a pickled dict with b"data" (uint8, N x 3072: 1024 red, 1024 green, 1024 blue
values, rows top to bottom) and b"labels" / b"fine_labels". Looked for in `root` itself, under the
release's folder name (which is also where torchvision's CIFAR10/CIFAR100 extract), and under
`cifar10/` or `cifar100/` and their release folder. `download=true` lets torchvision fetch and
extract the release into `root`.

Normalisation: per channel, by the mean and standard deviation of the training split's pixels
(scaled to [0, 1]), computed exactly from a 256-bin histogram. On the real data this is
mean (0.4914, 0.4822, 0.4465), std (0.2470, 0.2435, 0.2616) for CIFAR-10 and
mean (0.5071, 0.4865, 0.4409), std (0.2673, 0.2564, 0.2762) for CIFAR-100. (The widely copied
std (0.2023, 0.1994, 0.2010) of kuangliu/pytorch-cifar is the mean of per-image stds, not the
pixel std; we use the latter.) Training batches are augmented as the papers' scripts do:
RandomCrop(32, padding=4) padded with normalised black, and horizontal flips.

Stand-in (`if_missing=stand_in`, no files): a learnable synthetic task of the same shape, made
from a seed: each class is a smooth random colour image (8x8 upsampled to 32x32, mirror-symmetric
so flips keep the class); samples add smooth noise (`stand_in_noise` sets the difficulty) and a
little pixel noise, are quantised to uint8 and normalised as above.
"""
from __future__ import annotations

import functools
import pickle
import pickletools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from datasets import files
from datasets.base import REAL, Augmentation, DatasetNotFound, DatasetSplits

PIXELS = 32 * 32
SOURCE = "https://www.cs.toronto.edu/~kriz/cifar.html"
TEST_BATCH_SIZE = 250  # the papers' evaluation batch


@dataclass(frozen=True)
class Variant:
    classes: int
    folder: str  # the release's folder, also torchvision's
    train_files: tuple[str, ...]
    test_files: tuple[str, ...]
    label_key: bytes
    torchvision_class: str

    @property
    def names(self) -> tuple[str, ...]:
        return self.train_files + self.test_files


VARIANTS = {
    "cifar10": Variant(10, "cifar-10-batches-py", tuple(f"data_batch_{i}" for i in range(1, 6)), ("test_batch",), b"labels", "CIFAR10"),
    "cifar100": Variant(100, "cifar-100-python", ("train",), ("test",), b"fine_labels", "CIFAR100"),
}
FIX = f"replace it: download the python version again from {SOURCE} (or delete it and set dataset.download=true)"


def _variant(variant: str) -> Variant:
    files.require(variant in VARIANTS, f"dataset.variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    return VARIANTS[variant]


def _check_knobs(train: int, test: int, noise: float) -> None:
    files.require(train >= 1 and test >= 1, f"dataset.stand_in_train and stand_in_test must be >= 1, got {train} and {test}")
    files.require(noise >= 0, f"dataset.stand_in_noise must be >= 0, got {noise}")


def candidate_dirs(root: str | Path | None, variant: str) -> list[Path]:
    spec = _variant(variant)
    return files.search_dirs(root, (spec.folder, variant, f"{variant}/{spec.folder}"))


def locate(root: str | Path | None, variant: str = "cifar10") -> Path | None:
    """The first directory holding all of the variant's batch files, or None."""
    return files.locate(candidate_dirs(root, variant), _variant(variant).names)


def _missing(root: str | Path | None, variant: str) -> DatasetNotFound:
    spec = _variant(variant)
    return files.not_found(
        variant, spec.names, candidate_dirs(root, variant), f"{SOURCE}, python version, extracted",
        f"synthetic 3x32x32 images, {spec.classes} classes",
    )


def check_pickle(path: Path, keys: tuple[bytes, ...]) -> None:
    """Walks the pickle's opcodes without building anything (no code runs): a truncated or
    foreign file fails here. Reads every byte: ~0.3 s for CIFAR-10, ~1 s for CIFAR-100 here."""
    seen: set[bytes] = set()
    try:
        with path.open("rb") as handle:
            last = None
            for opcode, arg, _ in pickletools.genops(handle):
                last = opcode.name
                if isinstance(arg, (str, bytes)) and len(arg) < 32:
                    seen.add(arg.encode("latin-1") if isinstance(arg, str) else arg)
            trailing = handle.read(1)
    except Exception as error:  # pickletools raises ValueError on truncation, others on garbage
        raise files.corrupt(path, f"not a complete pickle ({error})", FIX) from None
    if last != "STOP" or trailing:
        raise files.corrupt(path, "not a complete pickle", FIX)
    if not set(keys) <= seen:
        raise files.corrupt(path, f"a pickle without the keys {', '.join(k.decode() for k in keys)}", FIX)


def _check_files(directory: Path, spec: Variant) -> None:
    for name in spec.names:
        check_pickle(directory / name, (b"data", spec.label_key))


def check_available(root: str | None = None, variant: str = "cifar10", download: bool = False, if_missing: str = "error",
                    stand_in_train: int = 2048, stand_in_test: int = 500, stand_in_noise: float = 2.0,
                    stand_in_seed: int = 0) -> None:
    """Raises DatasetNotFound (how to get the data) or DatasetCorrupt (which file) before launch,
    ConfigError for a bad knob value."""
    spec = _variant(variant)
    _check_knobs(stand_in_train, stand_in_test, stand_in_noise)
    files.check(
        lambda: locate(root, variant), lambda d: _check_files(d, spec), download, SOURCE, if_missing,
        lambda: None, lambda: _missing(root, variant),
    )


def read_batch(path: Path, label_key: bytes, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """One batch file: uint8 images N x 3072 and int64 labels N; bad content -> DatasetCorrupt."""
    try:
        with path.open("rb") as handle:
            entry = pickle.load(handle, encoding="bytes")  # the release was pickled by Python 2
        data = np.asarray(entry[b"data"])
        labels = np.asarray(entry[label_key], dtype=np.int64)
    except Exception as error:  # truncated, not a pickle, not a dict, missing key
        raise files.corrupt(path, f"unreadable CIFAR batch ({type(error).__name__}: {error})", FIX) from None
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * PIXELS:
        raise files.corrupt(path, f"b'data' is {data.dtype} {data.shape}, expected uint8 N x 3072", FIX)
    if labels.shape != (len(data),) or (labels.size and (labels.min() < 0 or labels.max() >= classes)):
        raise files.corrupt(path, f"{label_key.decode()} are not {len(data)} labels in [0, {classes})", FIX)
    return data, labels


def channel_stats(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and (population) std of uint8 images N x 3072, in [0, 1] units; exact,
    from a histogram, so no float copy of the whole split is made."""
    values = np.arange(256, dtype=np.float64) / 255.0
    means, stds = np.empty(3), np.empty(3)
    for c in range(3):
        counts = np.bincount(images[:, c * PIXELS : (c + 1) * PIXELS].ravel(), minlength=256).astype(np.float64)
        means[c] = counts @ values / counts.sum()
        stds[c] = np.sqrt(counts @ (values - means[c]) ** 2 / counts.sum())
    return means, stds


def normalise(images: np.ndarray, mean: np.ndarray, std: np.ndarray) -> torch.Tensor:
    """uint8 N x 3072 -> float32 N x 3 x 32 x 32, (x/255 - mean) / std per channel (by lookup)."""
    table = ((np.arange(256, dtype=np.float64)[None, :] / 255.0 - mean[:, None]) / std[:, None]).astype(np.float32)
    pixels = images.reshape(len(images), 3, PIXELS)
    out = np.empty(pixels.shape, dtype=np.float32)
    for c in range(3):
        out[:, c] = table[c][pixels[:, c]]
    return torch.from_numpy(out.reshape(len(images), 3, 32, 32))


def _download(root: str | None, spec: Variant) -> None:
    if not root:
        raise DatasetNotFound("dataset.download=true needs data_dir set")
    import torchvision  # only here: downloading is the rare path

    dataset = getattr(torchvision.datasets, spec.torchvision_class)
    dataset(str(Path(root).expanduser()), train=True, download=True)  # fetches, verifies, extracts once


def _smooth(count: int, generator: torch.Generator) -> torch.Tensor:
    """Random colour images varying over ~4 pixels: 8x8 Gaussian values, bilinear to 32x32."""
    coarse = torch.randn((count, 3, 8, 8), generator=generator)
    return torch.nn.functional.interpolate(coarse, size=(32, 32), mode="bilinear", align_corners=False)


def stand_in_arrays(classes: int, train: int, test: int, noise: float, seed: int) -> tuple[np.ndarray, ...]:
    """uint8 images N x 3072 and labels of the stand-in: class prototype + noise * smooth noise +
    a little pixel noise. Smooth noise competes with the prototypes (pixel noise alone averages
    out), so `noise` sets the difficulty: at 2.0 a nearest-class-mean classifier gets ~99% of
    2048/500 samples right with 10 classes, ~86% with 100."""
    generator = torch.Generator().manual_seed(seed)
    prototypes = _smooth(classes, generator)
    scale = prototypes.std()
    prototypes = (prototypes + prototypes.flip(-1)) / (2 * scale)  # mirror-symmetric: flips keep the class

    def sample(count: int) -> tuple[np.ndarray, np.ndarray]:
        labels = torch.randperm(count, generator=generator) % classes  # balanced, shuffled
        images = prototypes[labels] + noise * _smooth(count, generator) / scale
        images += 0.3 * torch.randn(images.shape, generator=generator)
        pixels = (127.5 + 25.0 * images).round().clamp(0, 255).to(torch.uint8)
        return pixels.reshape(count, 3 * PIXELS).numpy(), labels.numpy()

    return (*sample(train), *sample(test))


def load(root: str | None = None, variant: str = "cifar10", download: bool = False, if_missing: str = "error",
         stand_in_train: int = 2048, stand_in_test: int = 500, stand_in_noise: float = 2.0,
         stand_in_seed: int = 0) -> DatasetSplits:
    """Loads CIFAR-10/100 (or its stand-in) as normalised N x 3 x 32 x 32 float tensors."""
    spec = _variant(variant)
    _check_knobs(stand_in_train, stand_in_test, stand_in_noise)
    directory = files.resolve(
        lambda: locate(root, variant), download, functools.partial(_download, root, spec), if_missing,
        lambda: _missing(root, variant),
    )
    if directory is None:
        train_x, train_y, test_x, test_y = stand_in_arrays(spec.classes, stand_in_train, stand_in_test, stand_in_noise, stand_in_seed)
        source = f"stand-in: synthetic 3x32x32 images, {spec.classes} classes (seed {stand_in_seed})"
    else:
        train = [read_batch(directory / name, spec.label_key, spec.classes) for name in spec.train_files]
        test = [read_batch(directory / name, spec.label_key, spec.classes) for name in spec.test_files]
        train_x, train_y = np.concatenate([b[0] for b in train]), np.concatenate([b[1] for b in train])
        test_x, test_y = np.concatenate([b[0] for b in test]), np.concatenate([b[1] for b in test])
        source = REAL
    mean, std = channel_stats(train_x)
    return DatasetSplits(
        name=variant,
        train_x=normalise(train_x, mean, std),
        train_y=torch.from_numpy(train_y),
        test_x=normalise(test_x, mean, std),
        test_y=torch.from_numpy(test_y),
        num_classes=spec.classes,
        source=source,
        augmentation=Augmentation(padding=4, pad_value=tuple(float(v) for v in -mean / std), flip=True),
        test_batch_size=TEST_BATCH_SIZE,
    )
