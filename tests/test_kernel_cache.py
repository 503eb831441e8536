"""run.py compiles the selection kernels before launch only when this machine has not compiled
this version of them (experiments/engine/launcher/kernel_cache.py)."""
from __future__ import annotations

import shutil

import pytest

import sparsifiers.common.kernels
from experiments.engine.launcher import kernel_cache


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    """A copy of the kernel modules and an empty numba cache directory; warm-ups are counted."""
    source = tmp_path / "kernels"
    shutil.copytree(kernel_cache.KERNELS_DIR, source, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(kernel_cache, "KERNELS_DIR", source)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    calls = []
    monkeypatch.setattr(sparsifiers.common.kernels, "warm_up", lambda *args: calls.append(args) or True)
    monkeypatch.setattr(sparsifiers.common.kernels, "compiled_available", lambda: True)
    return source, calls


def test_compiles_once_and_again_after_the_kernels_change(kernels):
    source, calls = kernels
    assert kernel_cache.prepare("auto", "cpu")
    assert not kernel_cache.prepare("auto", "cpu") and not kernel_cache.prepare("compiled", "cpu")
    assert len(calls) == 1
    (source / "topk.py").write_text((source / "topk.py").read_text() + "\n# edited\n")
    assert kernel_cache.needed("auto", "cpu")
    assert kernel_cache.prepare("auto", "cpu") and len(calls) == 2


def test_nothing_to_compile_for_torch_kernels_or_a_gpu(kernels):
    _, calls = kernels
    assert not kernel_cache.prepare("torch", "cpu")
    assert not kernel_cache.prepare("auto", "cuda")
    assert calls == [] and kernel_cache.needed("auto", "cpu")


def test_a_failed_compilation_leaves_no_stamp(kernels, monkeypatch):
    def broken(*args):
        raise RuntimeError("numba failed")

    monkeypatch.setattr(sparsifiers.common.kernels, "warm_up", broken)
    assert not kernel_cache.prepare("auto", "cpu")  # the ranks compile, and report, themselves
    assert kernel_cache.needed("auto", "cpu")


def test_the_stamp_lives_beside_numbas_cache(kernels, tmp_path):
    kernel_cache.prepare("auto", "cpu")
    assert (tmp_path / "numba" / kernel_cache.STAMP).is_file()
