"""Decoded datasets kept on disk, so that a run decodes its data once instead of once per process.

Decoding Fashion-MNIST (gunzip, parse, scale, standardize) takes 1.5-3 s of CPU, and run.py's
validation and each of the W rank processes did it again, for every run: on a 2-core machine with
4 ranks, seconds of every quickstart run's start-up. An entry holds the decoded arrays as
uncompressed .npy files, mapped copy-on-write when loaded: nothing to decode, and the W processes
of a run share one copy in the page cache until one of them writes to its arrays.

An entry is used only when everything that decides its bytes is the same, so it never differs
from what decoding would return now. Its key covers:
- the SHA-256 of every source file (a replaced, re-downloaded or truncated file is a new key);
- the bytes of the code that decodes them (any edit of the loader is a new key);
- torch's and numpy's versions, the CPU capability torch dispatches to, and torch's thread
  count: a float reduction over the whole training set (the standardization's mean and std)
  gives different last bits with 2 threads than with 1 or 4, so the parent (its own threads) and
  the ranks (`threads_per_process`) each get the entry they would have computed.

The source digest alone also records that the files were parsed completely once: `verified`
lets the pre-launch check skip parsing files that are byte for byte those (an entry's, or a
parse earlier in the same process: mark_parsed).

Where: $SPARSEBENCH_CACHE_DIR/datasets/ (run.py sets it to the repository's outputs/.cache,
which the analysis never searches); unset or empty: no cache, every load decodes. Writes go to a
temporary directory renamed into place, so concurrent processes never read half an entry, and a
cache that cannot be written or read is skipped: it only ever costs the decode it would save.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from experiments.runformat.caches import DATASET_CACHE_VARIABLE

CACHE_VARIABLE = DATASET_CACHE_VARIABLE
MANIFEST = "manifest.json"  # written last: an entry without it is incomplete
KEEP = 4  # entries kept per dataset, the most recently used: an edited loader leaves its old ones
CHUNK = 1 << 20


def cache_root() -> Path | None:
    """Where entries go, or None when caching is off."""
    value = os.environ.get(CACHE_VARIABLE, "")
    return Path(value) / "datasets" if value else None


def file_digest(path: Path) -> str:
    """SHA-256 of a file's contents, hashed once per process while its size and mtime stay."""
    stat = os.stat(path)
    return _digest(str(path), stat.st_size, stat.st_mtime_ns, stat.st_ino)


@functools.lru_cache(maxsize=64)
def _digest(path: str, size: int, mtime_ns: int, inode: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def sources_digest(sources: Sequence[Path]) -> str:
    """One digest of the source files' contents, in order."""
    digest = hashlib.sha256()
    for path in sources:
        digest.update(file_digest(path).encode())
    return digest.hexdigest()[:24]


def decoder_digest(code: Sequence[Path]) -> str:
    """What else decides the decoded bytes: the decoding code and the numeric environment."""
    digest = hashlib.sha256()
    for path in code:
        digest.update(Path(path).read_bytes())
    numeric = [torch.__version__, np.__version__, torch.backends.cpu.get_cpu_capability(), torch.get_num_threads()]
    digest.update(json.dumps(numeric).encode())
    return digest.hexdigest()[:24]


def _entries(name: str, sources: str) -> Path | None:
    root = cache_root()
    return None if root is None else root / name / sources


# Source digests parsed completely in this process (mark_parsed). A study validates every job
# before it runs any (make compare: 168 validations), and without a cache entry yet (a fresh
# clone, or no SPARSEBENCH_CACHE_DIR) each parsed Fashion-MNIST's 30 MB of gzip again: 54 s.
_parsed_here: set[tuple[str, str]] = set()


def verified(name: str, sources: Sequence[Path]) -> bool:
    """Whether these exact source files were decoded completely before (an entry exists), or
    parsed completely in this process."""
    digest = sources_digest(sources)
    if (name, digest) in _parsed_here:
        return True
    folder = _entries(name, digest) if cache_root() is not None else None
    return folder is not None and any((entry / MANIFEST).is_file() for entry in _subdirs(folder))


def mark_parsed(name: str, sources: Sequence[Path]) -> None:
    """These exact source files were just parsed completely: `verified` holds for them here."""
    _parsed_here.add((name, sources_digest(sources)))


def _subdirs(folder: Path) -> list[Path]:
    try:
        return [entry for entry in folder.iterdir() if entry.is_dir()]
    except OSError:
        return []


def cached_arrays(
    name: str, sources: Sequence[Path], code: Sequence[Path], decode: Callable[[], dict[str, np.ndarray]]
) -> dict[str, np.ndarray]:
    """`decode()`'s arrays, from the cache when an entry for the same key exists, else decoded
    and stored. Arrays loaded from an entry are copy-on-write mappings of its files."""
    if cache_root() is None:
        return decode()
    folder = _entries(name, sources_digest(sources)) / decoder_digest(code)
    arrays = _read(folder)
    if arrays is not None:
        return arrays
    arrays = decode()
    _write(folder, arrays)
    return arrays


def _read(folder: Path) -> dict[str, np.ndarray] | None:
    try:
        names = json.loads((folder / MANIFEST).read_text())["arrays"]
        arrays = {key: np.load(folder / f"{key}.npy", mmap_mode="c", allow_pickle=False) for key in names}
    except (OSError, ValueError, KeyError):  # absent, or damaged by hand: decode again
        return None
    try:
        os.utime(folder / MANIFEST)  # recently used: pruned last
    except OSError:
        pass
    return arrays


def _prune(dataset: Path) -> None:
    """Keeps the KEEP most recently used entries of a dataset (over all its sources)."""
    entries = [entry for sources in _subdirs(dataset) for entry in _subdirs(sources) if (entry / MANIFEST).is_file()]
    def last_used(entry: Path) -> float:
        try:
            return (entry / MANIFEST).stat().st_mtime
        except OSError:
            return 0.0
    for entry in sorted(entries, key=last_used, reverse=True)[KEEP:]:
        shutil.rmtree(entry, ignore_errors=True)  # a process that mapped its files keeps them


def _write(folder: Path, arrays: dict[str, np.ndarray]) -> None:
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".incomplete-", dir=folder.parent))
    except OSError:  # not writable here: run without the cache
        return
    try:
        for key, array in arrays.items():
            np.save(staging / f"{key}.npy", np.ascontiguousarray(array), allow_pickle=False)
        (staging / MANIFEST).write_text(json.dumps({"arrays": sorted(arrays)}) + "\n")
        # An entry here failed to read (damaged by hand), or another process stored the same
        # bytes meanwhile: either way this one replaces it (a process that mapped its files keeps them).
        shutil.rmtree(folder, ignore_errors=True)
        os.rename(staging, folder)
    except OSError:
        pass  # a full disk, or a concurrent writer renamed its entry first: the same bytes
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _prune(folder.parent.parent)
