"""Checks of the machine a job is about to run on, before Hydra creates anything:

- the run directory Hydra will create can be created (output_root is not a file, not under
  /proc, not on a read-only filesystem), found by creating and removing a probe file in the
  nearest existing folder: permission bits say nothing for root or on a read-only mount;
- the run directory is not a run already: Hydra writes `.hydra/` into it before any code of
  ours runs, so refusing later (launch.py) would leave that run's `.hydra/` overwritten;
- W&B online can reach its host now, within a few seconds, instead of blocking ~100 s after
  launch.
"""
from __future__ import annotations

import copy
import os
import socket
import tempfile
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

from experiments.runformat.run_dir import STATUS
from experiments.runformat.errors import ConfigError

WANDB_CONNECT_TIMEOUT_S = 3.0  # a reachable W&B answers a TCP connect well within this
WANDB_DEFAULT_HOST = "https://api.wandb.ai"


def job_run_dir(cfg: DictConfig, multirun: bool, num: int) -> Path:
    """The directory Hydra will create for job `num`: hydra.run.dir, or sweep.dir/subdir."""
    whole = copy.deepcopy(cfg)  # set_config makes the hydra node read-only: not the caller's
    with open_dict(whole):
        whole.hydra.job.num = num
    HydraConfig.instance().set_config(whole)  # `${hydra:runtime.choices...}` resolves through it
    try:
        hydra = whole.hydra
        return Path(f"{hydra.sweep.dir}/{hydra.sweep.subdir}" if multirun else hydra.run.dir)
    finally:
        HydraConfig.instance().cfg = None  # @hydra.main sets its own; leave no trace for it


def _nearest_existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_creatable(run_dir: Path, key: str) -> None:
    """Raises ConfigError unless `run_dir` can be created (or written, if it exists)."""
    existing = _nearest_existing(run_dir)
    if not existing.is_dir():
        raise ConfigError(f"{key}: {existing} is a file, not a folder, so {run_dir} cannot be created: "
                          f"set {key} to a folder")
    try:
        descriptor, probe = tempfile.mkstemp(prefix=".sparsebench-probe-", dir=existing)
        os.close(descriptor)
        os.unlink(probe)
    except OSError as error:
        raise ConfigError(f"{key}: cannot create {run_dir}: {existing} is not writable ({error.strerror}): "
                          f"set {key} to a writable folder") from None


def check_not_a_run(run_dir: Path, key: str) -> None:
    """Refuses a run directory that already holds a run (its status.json or Hydra's .hydra/),
    before Hydra writes into it. (`resume=DIR`, which continues its own directory on purpose,
    never composes: experiments/engine/launcher/resume.py.)"""
    for marker in (STATUS, ".hydra/config.yaml"):
        if (run_dir / marker).exists():
            raise ConfigError(f"{key}: {run_dir} already holds a run ({marker} exists): choose another {key} "
                              "(or leave it unset: a new directory per run)")


def check_wandb_reachable(origin: str = "logger.wandb_mode=online", timeout_s: float = WANDB_CONNECT_TIMEOUT_S) -> None:
    """W&B online needs its host (WANDB_BASE_URL, or api.wandb.ai) reachable: a TCP connect
    that fails or takes longer than `timeout_s` fails here, in one line. `origin`: where "online"
    came from, as the message names it."""
    from datasets.files import endpoint  # here: it loads torch, which bad input never needs

    url = os.environ.get("WANDB_BASE_URL") or WANDB_DEFAULT_HOST
    host, port = endpoint(url)
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as error:
        reason = "no answer" if isinstance(error, TimeoutError) else (error.strerror or str(error))
        raise ConfigError(
            f"{origin}: W&B at {host}:{port} is unreachable (checked for {timeout_s:g} s: {reason}): "
            "use logger=wandb_offline (then `wandb sync` the run) or WANDB_MODE=offline where there is no network"
        ) from None
