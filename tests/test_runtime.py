"""The runtime settings resolved once (experiments/runformat/runtime.py), the errors module and the
declarations the builders make (issue 11 item 4): one rule each, read everywhere."""
from __future__ import annotations

import re
import subprocess

import pytest

from analysis.runinfo import describe_run
from experiments.engine.rank.build import RUNTIME_ARGUMENTS, target_of
from experiments.engine.launcher.compose import compose_job
from experiments.runformat.errors import ConfigError, require
from experiments.runformat.knob_types import accepted_parameters, parameter_types
from experiments.runformat.runtime import Runtime, recorded_world, resolve, wandb_mode
from experiments.engine.launcher.validate import validate
from tests.conftest import REPO, TINY_RUN

ENV_JSON_KEYS = {"device", "backend", "processes", "processes_per_node", "ranks_per_process", "world",
                 "threads_per_process"}


def test_processes_null_is_one_process_per_worker_and_distributed():
    runtime = resolve(compose_job([*TINY_RUN, "workers=4", "processes=null"]), cpu_count=8)
    assert (runtime.processes, runtime.ranks_per_process, runtime.world) == (4, 1, "distributed")
    assert runtime.processes_per_node == 4 and runtime.threads_per_process == 2  # 8 cores / 4 processes


def test_fewer_processes_than_workers_is_hosted():
    runtime = resolve(compose_job([*TINY_RUN, "workers=4", "processes=2"]), cpu_count=8)
    assert (runtime.processes, runtime.ranks_per_process, runtime.world) == (2, 2, "hosted")
    assert runtime.single_process is False and runtime.threads_per_process == 4
    assert resolve(compose_job([*TINY_RUN, "workers=4", "processes=1"])).single_process


def test_device_and_backend_auto_follow_the_gpus():
    cfg = compose_job([*TINY_RUN, "workers=4", "device=auto", "launcher.backend=auto"])
    assert (resolve(cfg, gpus=0).device, resolve(cfg, gpus=0).backend) == ("cpu", "gloo")
    assert (resolve(cfg, gpus=4).device, resolve(cfg, gpus=4).backend) == ("cuda", "nccl")
    assert resolve(cfg, gpus=2).device == "cpu"  # fewer GPUs than processes: the CPU, honestly
    # On this machine (CPU only, or a GPU per process): what torch sees decides.
    import torch

    expected = "cuda" if torch.cuda.is_available() and torch.cuda.device_count() >= 4 else "cpu"
    assert resolve(cfg).device == expected
    explicit = compose_job([*TINY_RUN, "device=cpu", "launcher.backend=gloo", "launcher.threads_per_process=3"])
    assert (resolve(explicit, gpus=8).device, resolve(explicit).threads_per_process) == ("cpu", 3)


def test_wandb_mode_in_the_environment_wins_over_the_config(monkeypatch):
    cfg = compose_job([*TINY_RUN, "logger=wandb_offline"])
    monkeypatch.delenv("WANDB_MODE", raising=False)
    assert resolve(cfg).wandb_mode == "offline" and wandb_mode("online") == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert resolve(cfg).wandb_mode == "disabled" and wandb_mode("online") == "disabled"
    assert wandb_mode("offline", {"WANDB_MODE": ""}) == "offline"  # empty: not set


def test_env_json_resolved_keeps_its_keys_and_round_trips():
    runtime = resolve(compose_job([*TINY_RUN, "workers=4", "processes=2"]), environ={"WANDB_MODE": "offline"})
    recorded = runtime.to_dict()
    assert set(recorded) == ENV_JSON_KEYS  # what existing runs hold and the analysis reads
    assert recorded["world"] == "hosted" and recorded["processes"] == 2
    # The W&B mode is not recorded: the rank takes it from the environment it was started in.
    assert Runtime.from_dict(recorded, "offline", environ={}) == runtime
    assert Runtime.from_dict(recorded, "offline", environ={"WANDB_MODE": "disabled"}).wandb_mode == "disabled"


def test_the_analysis_reads_the_world_as_recorded_or_by_the_same_rule():
    assert recorded_world(4, 4, {"world": "hosted"}) == "hosted"  # the record wins
    assert recorded_world(4, 2, {}, {}) == "hosted" and recorded_world(4, 4, {}) == "distributed"
    assert recorded_world(None, 2, {}) is None
    row = describe_run("r", "/runs/r", {"workers": 4, "processes": None}, {"resolved": {}}, None, None)
    assert (row["processes"], row["world"]) == (4, "distributed")  # processes: null, an old record


def test_one_config_error_and_every_import_of_it_from_experiments_errors():
    # the docs' code examples too (docs/adding_a_sparsifier.md runs as a test)
    files = subprocess.run(["git", "ls-files", "*.py", "*.md"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    definitions, imports = [], []
    for name in files:
        text = (REPO / name).read_text()
        definitions += [name for _ in re.finditer(r"^class ConfigError\b", text, re.M)]
        imports += [(name, line) for line in re.findall(r"^\s*from \S+ import .*\bConfigError\b.*$", text, re.M)
                    if not line.strip().startswith("from experiments.runformat.errors import")]
    assert definitions == ["experiments/runformat/errors.py"]
    assert imports == []
    with pytest.raises(ConfigError, match="^the key and the fix$"):
        require(False, "the key and the fix")
    require(True, "not raised")


def test_every_builder_declares_what_it_passes_and_validation_refuses_it_as_a_knob():
    assert RUNTIME_ARGUMENTS["sparsifier"] == {"layout", "world_size", "rank", "seed"}
    assert RUNTIME_ARGUMENTS["optimizer"] == {"params"}
    assert {"input_shape", "num_classes"} <= RUNTIME_ARGUMENTS["model"]
    cfg = compose_job([*TINY_RUN, "+sparsifier.rank=1"])
    with pytest.raises(ConfigError, match=r"sparsifier\.rank is not a knob of sparsifier=topk; its knobs: density,"):
        validate(cfg)


def test_one_signature_walk_gives_the_knob_names_and_their_types():
    cfg = compose_job(TINY_RUN)
    target = target_of(cfg.sparsifier)
    names = accepted_parameters(target)
    assert names == list(parameter_types(target)) and "self" not in names and "density" in names
    assert accepted_parameters(lambda **anything: None) is None  # anything goes
