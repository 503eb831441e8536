"""The runtime settings of a run, resolved once in the parent and read by everything after it.

run.py resolves them (`resolve(cfg)`) after validation and writes them to env.json's `resolved`
section; the launcher starts the ranks from them, the rank process rebuilds them from env.json
(`Runtime.from_dict`), the world and the analysis read the same rules from here. No other module
restates a rule: how many processes `processes: null` means, when a run is hosted or
distributed, which device and backend `auto` picks, how many threads a process gets, and which
W&B mode wins.

Neutral module: every role may import it, and it imports none of them (torch only inside
`resolve`, so the analysis can read a record without it).
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from omegaconf import DictConfig

HOSTED, DISTRIBUTED = "hosted", "distributed"
WANDB_MODES = ("offline", "online", "disabled")


def processes_of(processes: int | None, workers: int) -> int:
    """`processes: null` means one process per worker (one rank each)."""
    return processes if processes is not None else workers


def world_kind(workers: int, processes: int) -> str:
    """distributed: one rank per process; hosted: processes host several ranks each. Their
    measured exchange times mean different things and are never mixed."""
    return DISTRIBUTED if processes == workers else HOSTED


def wandb_mode(configured: str, environ: Mapping[str, str] | None = None) -> str:
    """WANDB_MODE in the environment wins over logger.wandb_mode (as the wandb library itself
    does), so that `WANDB_MODE=disabled make test` silences every run."""
    environ = os.environ if environ is None else environ
    return environ.get("WANDB_MODE") or configured


def wandb_mode_origin(configured: str, environ: Mapping[str, str] | None = None) -> str:
    """Where the W&B mode in effect comes from, as a message names it: `WANDB_MODE=online (the
    environment)` or `logger.wandb_mode=online`."""
    environ = os.environ if environ is None else environ
    if environ.get("WANDB_MODE"):
        return f"WANDB_MODE={environ['WANDB_MODE']} (the environment variable, which wins over logger.wandb_mode)"
    return f"logger.wandb_mode={configured}"


@dataclass(frozen=True)
class Runtime:
    """What every rank of one run agrees on. The fields up to `threads_per_process` are exactly
    env.json's `resolved` section (same keys, same values: existing runs and the analysis read
    it); `wandb_mode` is not recorded there but taken from the environment where a run, or its
    resume, starts (a resume with WANDB_MODE=disabled must not log online)."""

    device: str  # cpu | cuda
    backend: str  # gloo | nccl
    processes: int  # P, on all nodes together
    processes_per_node: int
    ranks_per_process: int  # W / P
    world: str  # hosted | distributed
    threads_per_process: int  # torch threads and OMP_NUM_THREADS of each process
    wandb_mode: str  # offline | online | disabled, after the WANDB_MODE precedence

    def to_dict(self) -> dict[str, Any]:
        """env.json's `resolved` section."""
        recorded = asdict(self)
        del recorded["wandb_mode"]
        return recorded

    @classmethod
    def from_dict(cls, resolved: Mapping[str, Any], configured_wandb_mode: str,
                  environ: Mapping[str, str] | None = None) -> Runtime:
        """The settings env.json recorded, with the W&B mode of this process's environment."""
        recorded = {f.name: resolved[f.name] for f in fields(cls) if f.name != "wandb_mode"}
        return cls(**recorded, wandb_mode=wandb_mode(configured_wandb_mode, environ))

    @property
    def single_process(self) -> bool:
        """One process hosts every rank: no torch.distributed is needed."""
        return self.processes == 1


def resolve(cfg: DictConfig, environ: Mapping[str, str] | None = None, cpu_count: int | None = None,
            gpus: int | None = None) -> Runtime:
    """Device, backend, process and thread counts, and the W&B mode, decided once for every rank
    of the run. `cfg` is validated (workers divisible by processes, processes by nodes).
    `environ`, `cpu_count` and `gpus` default to this machine's (tests pass their own)."""
    processes = processes_of(cfg.processes, cfg.workers)
    per_node = processes // cfg.launcher.nnodes
    device = cfg.device
    if device == "auto":
        device = auto_device(per_node, _gpu_count(gpus))
    backend = cfg.launcher.backend
    if backend == "auto":
        backend = "nccl" if device == "cuda" else "gloo"
    # rank_order promises the same bits however the ranks are hosted, and torch's CPU kernels
    # split their reductions (a conv's weight gradient over the batch) by thread: every layout
    # then gets the thread count of one rank per process.
    workers_per_node = cfg.workers // cfg.launcher.nnodes
    threads_for = workers_per_node if cfg.reduction == "rank_order" else per_node
    cores = os.cpu_count() if cpu_count is None else cpu_count
    threads = cfg.launcher.threads_per_process or max(1, (cores or 1) // threads_for)
    return Runtime(
        device=device,
        backend=backend,
        processes=processes,
        processes_per_node=per_node,
        ranks_per_process=cfg.workers // processes,
        world=world_kind(cfg.workers, processes),
        threads_per_process=threads,
        wandb_mode=wandb_mode(cfg.logger.wandb_mode, environ),
    )


def auto_device(processes_per_node: int, gpus: int) -> str:
    """What `device: auto` means: one GPU per process is what NCCL needs; with fewer GPUs, the
    CPU (gloo) is the honest choice. So on a machine with one GPU a hosted run (one process) goes
    to the GPU and a 2-process run to the CPU: layouts of one sweep can land on different devices
    (`mixed_layout_devices`)."""
    return "cuda" if gpus >= processes_per_node else "cpu"


def mixed_layout_devices(cfgs: list[DictConfig], gpus: int) -> str | None:
    """Why the jobs of one sweep that compare layouts bit for bit (`reduction: rank_order`) would
    not run on one device, as one line naming the fix; None when they would. Only `device: auto`
    is questioned (a device written out is the user's choice). `gpus`: this machine's count, a
    parameter so that the rule is tested without a GPU."""
    compared = [cfg for cfg in cfgs if cfg.reduction == "rank_order" and cfg.device == "auto"]
    placed: dict[str, list[str]] = {}
    for cfg in compared:
        processes = processes_of(cfg.processes, cfg.workers)
        layouts = placed.setdefault(auto_device(processes // cfg.launcher.nnodes, gpus), [])
        layout = f"workers={cfg.workers} processes={processes}"
        if layout not in layouts:
            layouts.append(layout)
    if len(placed) < 2:
        return None
    where = "; ".join(f"{', '.join(layouts)} on {device}" for device, layouts in sorted(placed.items()))
    return (f"reduction=rank_order compares layouts bit for bit, but device=auto puts them on different devices "
            f"with {gpus} GPU(s) here ({where}; auto takes the GPU only with one per process), and CUDA and the CPU "
            f"round differently: set device=cpu for every job (or device=cuda with a GPU per process)")


def _gpu_count(gpus: int | None) -> int:
    if gpus is not None:
        return gpus
    import torch  # here, not at import: the analysis reads records without needing torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def recorded_world(workers: int | None, processes: int | None, *records: Mapping[str, Any]) -> str | None:
    """hosted or distributed as the first of `records` (env.json's `resolved`, then summary.json)
    recorded it; for records without it (a run cut short, an older or synthetic record), the
    same rule applied to the counts; None when they are unknown too."""
    for record in records:
        if record.get("world"):
            return record["world"]
    if workers is not None and processes is not None:
        return world_kind(workers, processes)
    return None
