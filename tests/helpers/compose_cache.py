"""compose_job, remembered on disk for one test session.

A test world (tests/helpers/harness.py, tests/helpers/resume_harness.py) composes one config per method in each
of its processes, and a module's worlds compose the same ones again: 22 methods in 5 worlds of
1 to 4 processes made 220 compositions for test_distributed alone, at about 0.35 s each, a third
of the worlds' time. The session fixture in tests/conftest.py names a directory
($SPARSEBENCH_TEST_COMPOSE_CACHE); every process of every world reads and writes it. Without it
(a world run by hand) this is compose_job itself.

The key is the overrides, the working directory (Hydra's runtime settings hold it) and the bytes
of every file under conf/: a config edited during a session is composed anew, never served stale.
A composed config is pickled whole (OmegaConf keeps its flags and types through pickle) and
written atomically, so processes that compose the same config at once each leave a whole file.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import pickle
from pathlib import Path

from omegaconf import DictConfig

from experiments.engine.launcher.compose import CONF_DIR, compose_job

CACHE_VARIABLE = "SPARSEBENCH_TEST_COMPOSE_CACHE"


@functools.cache
def conf_fingerprint() -> str:
    digest = hashlib.sha256()
    for path in sorted(CONF_DIR.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(CONF_DIR)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def compose_cached(overrides: list[str]) -> DictConfig:
    folder = os.environ.get(CACHE_VARIABLE)
    if not folder:
        return compose_job(overrides)
    key = hashlib.sha256(json.dumps([overrides, os.getcwd(), conf_fingerprint()]).encode()).hexdigest()
    path = Path(folder) / f"{key}.pickle"
    if path.is_file():
        return pickle.loads(path.read_bytes())
    cfg = compose_job(overrides)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    partial.write_bytes(pickle.dumps(cfg))
    os.replace(partial, path)
    return cfg
