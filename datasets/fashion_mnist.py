"""Fashion-MNIST (Zalando): 60,000 + 10,000 grey 28x28 images of 10 clothing classes.

Found, in this order: in `root` (the four IDX files, gzipped or not, directly or under
`fashion_mnist/` or torchvision's `FashionMNIST/raw/`); in the directory of Debian's
`dataset-fashion-mnist` package; or downloaded by torchvision into `root` when `download=true`
and the network allows. Otherwise loading fails at once and says how to get the data.
"""
from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import torch

from datasets import base, cache, files
from datasets.base import DatasetNotFound, DatasetSplits, standardize

NAME = "fashion_mnist"
DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
# The code that decides the decoded bytes (datasets/cache.py keys its entries by it).
CODE = (Path(__file__), Path(base.__file__))
FILES = {
    "train_x": "train-images-idx3-ubyte",
    "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte",
    "test_y": "t10k-labels-idx1-ubyte",
}
SHAPES = {"train_x": (60000, 28, 28), "train_y": (60000,), "test_x": (10000, 28, 28), "test_y": (10000,)}
MIRROR = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"  # torchvision's
FIX = "replace it: reinstall dataset-fashion-mnist or put the original IDX files there (or delete it and set dataset.download=true)"
HOW_TO_GET = (
    "Fashion-MNIST not found in {where}. Get it with `apt-get install dataset-fashion-mnist` "
    "(Debian/Ubuntu; `make run` does this), or put the four IDX files "
    "(train-images-idx3-ubyte.gz, ...) in data_dir, or set dataset.download=true where there is "
    "network, or pick dataset=digits (no download)"
)


def _file_in(directory: Path, stem: str) -> Path | None:
    for name in (stem + ".gz", stem):
        if (directory / name).is_file():
            return directory / name
    return None


def candidate_dirs(root: str | Path | None, system_dir: str | Path | None = None) -> list[Path]:
    """Where the files may be, in search order."""
    dirs = []
    if root:
        root = Path(root).expanduser()
        dirs += [root, root / "fashion_mnist", root / "FashionMNIST" / "raw"]
    dirs.append(Path(system_dir) if system_dir else DEBIAN_DIR)
    return dirs


def locate(root: str | Path | None, system_dir: str | Path | None = None) -> Path | None:
    """The first directory holding all four files, or None."""
    for directory in candidate_dirs(root, system_dir):
        if all(_file_in(directory, stem) for stem in FILES.values()):
            return directory
    return None


def check_available(root: str | None = None, download: bool = False, system_dir: str | None = None) -> None:
    """Raises DatasetNotFound, saying how to get the data, unless it is here or may be downloaded
    (the mirror reachable), and DatasetCorrupt naming a file that is truncated or not IDX."""
    directory = locate(root, system_dir)
    if directory is not None:
        sources = _sources(directory)
        if cache.verified(NAME, sources):  # these exact bytes were parsed completely before
            return
        for key, path in zip(FILES, sources):
            _read_idx(path, SHAPES[key])
        cache.mark_parsed(NAME, sources)
        return
    where = ", ".join(str(d) for d in candidate_dirs(root, system_dir))
    if not download:
        raise DatasetNotFound(HOW_TO_GET.format(where=where))
    if not root:
        raise DatasetNotFound("dataset.download=true needs data_dir set (where the files go)")
    files.require_reachable(MIRROR, HOW_TO_GET.format(where=where))


def _read_idx(path: Path, shape: tuple[int, ...]) -> np.ndarray:
    """IDX format: big-endian header (magic 0x0000080N: uint8, N dims; the dims), then uint8
    data. A truncated, foreign or mis-shaped file raises DatasetCorrupt naming it."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            data = handle.read()
    except (OSError, EOFError) as error:  # gzip: "not a gzipped file", "ended before the end-of-stream marker"
        raise files.corrupt(path, f"unreadable ({error})", FIX) from None
    ndim = data[3] if len(data) >= 4 else 0
    if len(data) < 4 + 4 * ndim or data[:3] != b"\x00\x00\x08" or ndim != len(shape):
        raise files.corrupt(path, f"not an IDX file of uint8 with {len(shape)} dimension(s)", FIX)
    found = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    if found != shape or len(data) != 4 + 4 * ndim + int(np.prod(shape)):
        raise files.corrupt(path, f"shape {found} with {len(data) - 4 - 4 * ndim} data bytes, expected shape {shape} "
                                  f"with {int(np.prod(shape))} (truncated?)", FIX)
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def _download(root: Path) -> None:
    import torchvision  # only here: downloading is the rare path

    for train in (True, False):
        torchvision.datasets.FashionMNIST(str(root), train=train, download=True)


def load(root: str | None = None, download: bool = False, system_dir: str | None = None) -> DatasetSplits:
    """Loads Fashion-MNIST as standardized float tensors (N x 1 x 28 x 28)."""
    directory = locate(root, system_dir)
    if directory is None and download and root:
        try:
            _download(Path(root).expanduser())
        except Exception as error:  # no network: say so, with the way out
            raise DatasetNotFound(HOW_TO_GET.format(where=root) + f" (download failed: {error})") from error
        directory = locate(root, system_dir)
    if directory is None:
        raise DatasetNotFound(HOW_TO_GET.format(where=", ".join(str(d) for d in candidate_dirs(root, system_dir))))
    sources = _sources(directory)
    arrays = cache.cached_arrays(NAME, sources, CODE, lambda: _decode(sources))
    tensors = {key: torch.from_numpy(array) for key, array in arrays.items()}
    return DatasetSplits(name=NAME, train_x=tensors["train_x"], train_y=tensors["train_y"], test_x=tensors["test_x"],
                         test_y=tensors["test_y"], num_classes=10)


def _sources(directory: Path) -> list[Path]:
    """The four files in FILES order."""
    return [_file_in(directory, stem) for stem in FILES.values()]


def _decode(sources: list[Path]) -> dict[str, np.ndarray]:
    """The splits as arrays: images scaled to [0, 1] and standardized, labels as int64."""
    arrays = {key: _read_idx(path, SHAPES[key]) for key, path in zip(FILES, sources)}
    train_x = torch.from_numpy(arrays["train_x"].astype(np.float32) / 255.0).unsqueeze(1)
    test_x = torch.from_numpy(arrays["test_x"].astype(np.float32) / 255.0).unsqueeze(1)
    train_x, test_x = standardize(train_x, test_x)
    return {
        "train_x": train_x.numpy(),
        "train_y": arrays["train_y"].astype(np.int64),
        "test_x": test_x.numpy(),
        "test_y": arrays["test_y"].astype(np.int64),
    }
