"""The decoded-dataset cache (datasets/cache.py): an entry is only ever read for the same source
bytes, decoding code and numeric environment, and gives exactly what decoding gives."""
from __future__ import annotations

import gzip
import os

import numpy as np
import pytest
import torch

from datasets import cache, fashion_mnist
from datasets.base import DatasetCorrupt


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_VARIABLE, str(tmp_path / "cache"))
    return tmp_path / "cache"


def write_sources(directory, content=b"abc"):
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / "a.bin", directory / "b.bin"]
    for index, path in enumerate(paths):
        path.write_bytes(content + bytes([index]))
    return paths


def code_file(tmp_path, text="def decode(): ...\n"):
    path = tmp_path / "decoder.py"
    path.write_text(text)
    return path


class Decoder:
    """A decode function that counts its calls."""

    def __init__(self, arrays):
        self.arrays, self.calls = arrays, 0

    def __call__(self):
        self.calls += 1
        return {key: value.copy() for key, value in self.arrays.items()}


ARRAYS = {"x": np.arange(12, dtype=np.float32).reshape(3, 1, 2, 2) / 7, "y": np.array([3, 1, 2], dtype=np.int64)}


def test_a_second_load_reads_the_entry_with_the_same_bytes_and_never_decodes(cache_dir, tmp_path):
    sources, code = write_sources(tmp_path / "src"), [code_file(tmp_path)]
    decode = Decoder(ARRAYS)
    first = cache.cached_arrays("demo", sources, code, decode)
    second = cache.cached_arrays("demo", sources, code, decode)
    assert decode.calls == 1
    for key, expected in ARRAYS.items():
        for got in (first[key], second[key]):
            assert got.dtype == expected.dtype and got.shape == expected.shape
            assert got.tobytes() == expected.tobytes()
    tensor = torch.from_numpy(second["x"])  # writable (copy-on-write): torch takes it without a warning
    tensor.add_(1)
    assert cache.cached_arrays("demo", sources, code, decode)["x"].tobytes() == ARRAYS["x"].tobytes()


def test_a_changed_source_file_is_a_new_entry_and_is_not_verified(cache_dir, tmp_path):
    sources, code = write_sources(tmp_path / "src"), [code_file(tmp_path)]
    decode = Decoder(ARRAYS)
    cache.cached_arrays("demo", sources, code, decode)
    assert cache.verified("demo", sources)
    stat = os.stat(sources[1])
    sources[1].write_bytes(b"abd\x01")  # same size, same mtime: only the contents differ
    os.utime(sources[1], ns=(stat.st_atime_ns, stat.st_mtime_ns))
    cache._digest.cache_clear()  # a new process: the digest memo lives in one process only
    assert not cache.verified("demo", sources)
    cache.cached_arrays("demo", sources, code, decode)
    assert decode.calls == 2


def test_a_source_rewritten_in_the_same_process_is_hashed_again(cache_dir, tmp_path):
    sources, code = write_sources(tmp_path / "src"), [code_file(tmp_path)]
    decode = Decoder(ARRAYS)
    cache.cached_arrays("demo", sources, code, decode)
    sources[0].write_bytes(b"a longer file than before")
    cache.cached_arrays("demo", sources, code, decode)
    assert decode.calls == 2


def test_changed_decoding_code_or_thread_count_is_a_new_entry(cache_dir, tmp_path):
    sources, code = write_sources(tmp_path / "src"), code_file(tmp_path)
    decode = Decoder(ARRAYS)
    cache.cached_arrays("demo", sources, [code], decode)
    code.write_text("def decode(): return 1\n")
    cache.cached_arrays("demo", sources, [code], decode)
    assert decode.calls == 2
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)  # a float reduction's last bits depend on it
    try:
        cache.cached_arrays("demo", sources, [code], decode)
    finally:
        torch.set_num_threads(threads)
    assert decode.calls == 3
    cache.cached_arrays("demo", sources, [code], decode)
    assert decode.calls == 3


def test_a_damaged_entry_is_decoded_again_and_replaced(cache_dir, tmp_path):
    sources, code = write_sources(tmp_path / "src"), [code_file(tmp_path)]
    decode = Decoder(ARRAYS)
    cache.cached_arrays("demo", sources, code, decode)
    (entry,) = list(cache_dir.glob("datasets/demo/*/*/x.npy"))
    entry.write_bytes(entry.read_bytes()[:-8])  # truncated
    again = cache.cached_arrays("demo", sources, code, decode)
    assert decode.calls == 2 and again["x"].tobytes() == ARRAYS["x"].tobytes()
    assert cache.cached_arrays("demo", sources, code, decode)["x"].tobytes() == ARRAYS["x"].tobytes()
    assert decode.calls == 2


def test_only_the_most_recently_used_entries_are_kept(cache_dir, tmp_path):
    decode = Decoder(ARRAYS)
    code = [code_file(tmp_path)]
    for index in range(cache.KEEP + 2):
        cache.cached_arrays("demo", write_sources(tmp_path / f"src{index}", content=bytes([index])), code, decode)
    assert len(list(cache_dir.glob("datasets/demo/*/*/manifest.json"))) == cache.KEEP


def test_without_the_variable_nothing_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_VARIABLE, "")
    sources, code = write_sources(tmp_path / "src"), [code_file(tmp_path)]
    decode = Decoder(ARRAYS)
    cache.cached_arrays("demo", sources, code, decode)
    cache.cached_arrays("demo", sources, code, decode)
    assert decode.calls == 2 and not cache.verified("demo", sources)


def write_fashion_mnist(directory):
    """The four IDX files with a repeating pattern for images (nonzero spread) and labels."""
    directory.mkdir(parents=True, exist_ok=True)
    for key, stem in fashion_mnist.FILES.items():
        shape = fashion_mnist.SHAPES[key]
        header = b"\x00\x00\x08" + bytes([len(shape)]) + b"".join(size.to_bytes(4, "big") for size in shape)
        data = (np.arange(int(np.prod(shape))) % (256 if key.endswith("x") else 10)).astype(np.uint8)
        with gzip.open(directory / f"{stem}.gz", "wb", compresslevel=1) as handle:
            handle.write(header + data.tobytes())


def test_fashion_mnist_from_the_cache_equals_decoding_and_a_truncated_file_still_fails(cache_dir, tmp_path, monkeypatch):
    root = tmp_path / "fmnist"
    write_fashion_mnist(root)
    monkeypatch.setenv(cache.CACHE_VARIABLE, "")
    decoded = fashion_mnist.load(str(root), system_dir=str(tmp_path / "none"))
    monkeypatch.setenv(cache.CACHE_VARIABLE, str(cache_dir))
    stored = fashion_mnist.load(str(root), system_dir=str(tmp_path / "none"))
    loaded = fashion_mnist.load(str(root), system_dir=str(tmp_path / "none"))
    assert len(list(cache_dir.glob("datasets/fashion_mnist/*/*/manifest.json"))) == 1
    for data in (stored, loaded):
        for field in ("train_x", "train_y", "test_x", "test_y"):
            got, expected = getattr(data, field), getattr(decoded, field)
            assert got.dtype == expected.dtype and got.shape == expected.shape and torch.equal(got, expected), field
    fashion_mnist.check_available(str(root), system_dir=str(tmp_path / "none"))  # verified: not parsed again

    images = root / "train-images-idx3-ubyte.gz"
    with gzip.open(images, "rb") as handle:
        content = handle.read()
    with gzip.open(images, "wb", compresslevel=1) as handle:
        handle.write(content[:-1000])  # truncated: new bytes, so no entry vouches for them
    with pytest.raises(DatasetCorrupt, match="truncated"):
        fashion_mnist.check_available(str(root), system_dir=str(tmp_path / "none"))
    with pytest.raises(DatasetCorrupt, match="truncated"):
        fashion_mnist.load(str(root), system_dir=str(tmp_path / "none"))


def test_validation_parses_the_same_files_once_per_process_and_a_changed_file_again(tmp_path, monkeypatch):
    """make compare validates 168 jobs before it runs any, with no cache entry yet on a fresh clone:
    the files are parsed at the first, and again only when their bytes change."""
    root = tmp_path / "fmnist"
    write_fashion_mnist(root)
    monkeypatch.setenv(cache.CACHE_VARIABLE, "")  # no entry can vouch for them
    monkeypatch.setattr(cache, "_parsed_here", set())
    parsed = []
    read_idx = fashion_mnist._read_idx
    monkeypatch.setattr(fashion_mnist, "_read_idx", lambda path, shape: parsed.append(path.name) or read_idx(path, shape))
    for _ in range(3):
        fashion_mnist.check_available(str(root), system_dir=str(tmp_path / "none"))
    assert len(parsed) == 4  # the four files, once
    labels = root / "t10k-labels-idx1-ubyte.gz"
    with gzip.open(labels, "rb") as handle:
        content = handle.read()
    with gzip.open(labels, "wb", compresslevel=1) as handle:
        handle.write(content[:-10])
    with pytest.raises(DatasetCorrupt, match="truncated"):
        fashion_mnist.check_available(str(root), system_dir=str(tmp_path / "none"))
