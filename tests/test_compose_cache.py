"""The test worlds' compose cache (tests/helpers/compose_cache.py) serves exactly what Hydra composes,
and composes anew when a config file changes."""
from __future__ import annotations

from omegaconf import OmegaConf

from experiments.engine.launcher.compose import compose_job
from tests.helpers import compose_cache

OVERRIDES = ["sparsifier=deft", "workers=4", "dataset=synthetic", "model=mlp", "sparsifier.density=0.3"]


def same(a, b) -> bool:
    return (OmegaConf.to_yaml(a) == OmegaConf.to_yaml(b) and OmegaConf.is_struct(a) == OmegaConf.is_struct(b)
            and OmegaConf.to_container(a, resolve=False) == OmegaConf.to_container(b, resolve=False))


def test_a_cached_config_is_the_composed_one(tmp_path, monkeypatch):
    monkeypatch.setenv(compose_cache.CACHE_VARIABLE, str(tmp_path))
    reference = compose_job(OVERRIDES)
    first = compose_cache.compose_cached(OVERRIDES)
    assert len(list(tmp_path.iterdir())) == 1
    second = compose_cache.compose_cached(OVERRIDES)  # read back from the file
    assert same(first, reference) and same(second, reference)
    assert second.sparsifier.density == 0.3 and second is not first


def test_an_edited_config_is_composed_anew_and_no_cache_is_compose_itself(tmp_path, monkeypatch):
    monkeypatch.setenv(compose_cache.CACHE_VARIABLE, str(tmp_path))
    compose_cache.compose_cached(OVERRIDES)
    monkeypatch.setattr(compose_cache, "conf_fingerprint", lambda: "another conf/")
    compose_cache.compose_cached(OVERRIDES)
    assert len(list(tmp_path.iterdir())) == 2
    monkeypatch.delenv(compose_cache.CACHE_VARIABLE)
    assert same(compose_cache.compose_cached(OVERRIDES), compose_job(OVERRIDES))
    assert len(list(tmp_path.iterdir())) == 2
