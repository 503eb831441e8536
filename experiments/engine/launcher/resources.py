"""Memory, processes and data a job needs, estimated before launch and refused when they
cannot fit (and, at the end, a batch for every worker).

One process hosting L ranks of a model with N gradient elements (float32) needs about

    base (Python, torch, the kernels) + dataset
    + N x 4 bytes x (parameters + flat gradient + optimizer state slots)
    + L x N x 4 bytes x (residual + the method's own per-rank vectors)
    + N x 4 bytes x SCRATCH_VECTORS (full-size scratch, shared by the hosted ranks)

(on a GPU, one per process, all but the first line; untested here: no GPU) and a node runs `processes / nnodes` such processes. The formula counts only what is surely
allocated (it is a lower bound), so what it refuses would certainly not fit. The union
exchange's sum (at most 2 |U| <= 2 N floats however many ranks are hosted: one buffer and one
scratch, collectives.py) is left out for that reason: |U| depends on the data.
experiments/studies/benchmarks/hosted_memory.py measures real sessions beside the same formula.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from omegaconf import DictConfig, OmegaConf

from datasets.base import REAL
from experiments.runformat.errors import ConfigError
from experiments.runformat.runtime import processes_of, resolve
from experiments.engine.core.tasks import make_task

ELEMENT_BYTES = 4  # float32 gradients, residuals and parameters
# A rank process before its tensors: interpreter, torch, numba's kernels (~0.4-1.1 GiB measured here).
PROCESS_BASE_BYTES = 400 * 2**20
SCRATCH_VECTORS = 2  # |acc| and a mask (sparsifiers/common/workspace.py), one set per process
MAX_PROCESSES_PER_CORE = 32  # far beyond what time-slicing makes useful: refuse, suggest hosted ranks
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one process needs, by part, and how many processes share a node."""

    numel: int
    hosted_ranks: int
    processes_per_node: int
    base_bytes: int
    dataset_bytes: int
    model_bytes: int  # parameters + flat gradient + optimizer state
    per_rank_bytes: int  # one hosted rank's residual and method state
    scratch_bytes: int

    @property
    def process_bytes(self) -> int:
        return self.base_bytes + self.dataset_bytes + self.model_bytes + self.hosted_ranks * self.per_rank_bytes + self.scratch_bytes

    @property
    def node_bytes(self) -> int:
        return self.processes_per_node * self.process_bytes

    def describe(self) -> str:
        return (f"{self.processes_per_node} process(es) x {_size(self.process_bytes)} = {_size(self.node_bytes)} "
                f"(per process: {_size(self.base_bytes)} runtime, {_size(self.dataset_bytes)} dataset, "
                f"{_size(self.model_bytes)} model and optimizer, {self.hosted_ranks} hosted rank(s) x "
                f"{_size(self.per_rank_bytes)} residual and state, {_size(self.scratch_bytes)} scratch)")


def _size(nbytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if nbytes < 1024 or unit == "PiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    raise AssertionError


def optimizer_slots(target: type, knobs: dict, owns_momentum: bool) -> int:
    """Full-size state vectors the optimizer keeps: Adam two moments, SGD-like one momentum buffer
    when momentum > 0 (0 where the sparsifier applies momentum itself, as build_optimizer does)."""
    if isinstance(target, type) and issubclass(target, (torch.optim.Adam, torch.optim.AdamW)):
        return 2
    return 1 if knobs.get("momentum") and not owns_momentum else 0


def method_vectors(owns_momentum: bool) -> int:
    """Full-size vectors one hosted rank keeps: its residual (allocated with or without error
    feedback: it holds acc = grad + residual during a step) and, for a method that owns momentum
    (DGC), its momentum."""
    return 1 + int(owns_momentum)


def estimate(numel: int, workers: int, processes: int, nnodes: int, dataset_bytes: int, optimizer_state: int,
             rank_vectors: int) -> MemoryEstimate:
    """The formula above for one node of the job."""
    vector = numel * ELEMENT_BYTES
    return MemoryEstimate(
        numel=numel,
        hosted_ranks=workers // processes,
        processes_per_node=processes // nnodes,
        base_bytes=PROCESS_BASE_BYTES,
        dataset_bytes=dataset_bytes,
        model_bytes=vector * (2 + optimizer_state),
        per_rank_bytes=vector * rank_vectors,
        scratch_bytes=vector * SCRATCH_VECTORS,
    )


def tensor_bytes(data: object) -> int:
    """Bytes of the tensors a dataset container holds (every process loads its own copy)."""
    return sum(value.numel() * value.element_size() for value in vars(data).values() if isinstance(value, torch.Tensor))


def available_memory() -> int | None:
    """MemAvailable of this machine (Linux), or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_resources(cfg: DictConfig, numel: int, data: object, optimizer_target: type, owns_momentum: bool) -> None:
    """Refuses a job whose estimate exceeds this node's available memory, or which runs more
    processes than the cores can carry; the message prints the estimate."""
    launcher = OmegaConf.select(cfg, "hydra.launcher._target_")
    if launcher is not None and launcher != BASIC_LAUNCHER:
        return  # Slurm and friends: the job validates again on its own node, where this is true
    processes = processes_of(cfg.processes, cfg.workers)
    optimizer = OmegaConf.to_container(cfg.optimizer, resolve=True)
    memory = estimate(numel, cfg.workers, processes, cfg.launcher.nnodes, tensor_bytes(data),
                      optimizer_slots(optimizer_target, optimizer, owns_momentum), method_vectors(owns_momentum))
    available = available_memory()
    where = f"workers={cfg.workers} processes={processes}" + (f" launcher.nnodes={cfg.launcher.nnodes}" if cfg.launcher.nnodes > 1 else "")
    host_bytes = memory.node_bytes
    if resolve(cfg).device == "cuda":
        # One GPU per process holds the tensors; the host keeps the runtime and the dataset.
        gpu_bytes = memory.process_bytes - memory.base_bytes - memory.dataset_bytes
        gpu_total = torch.cuda.get_device_properties(0).total_memory
        if gpu_bytes > gpu_total:
            raise ConfigError(f"{where} needs about {_size(gpu_bytes)} per GPU ({memory.describe()}), but a GPU here has "
                              f"{_size(gpu_total)}: lower workers per process")
        host_bytes = memory.processes_per_node * (memory.base_bytes + memory.dataset_bytes)
    if available is not None and host_bytes > available:
        hint = "lower workers" if memory.hosted_ranks > 1 else "host several ranks per process (processes=1) or lower workers"
        raise ConfigError(f"{where} needs about {memory.describe()}, but this node has {_size(available)} available: {hint}")
    cores = os.cpu_count() or 1
    if memory.processes_per_node > MAX_PROCESSES_PER_CORE * cores:
        raise ConfigError(f"{where} starts {memory.processes_per_node} processes on a node with {cores} cores "
                          f"(at most {MAX_PROCESSES_PER_CORE} per core): host ranks in fewer processes, e.g. processes=1")


# Dataset knobs that set how much training data there is (by the option that has them), and
# which way to turn each for more.
DATA_SIZE_KNOBS = {"num_train": "raise", "stand_in_train": "raise", "stand_in_verses": "raise", "test_fraction": "lower"}


def check_every_worker_has_a_batch(cfg: DictConfig, data: object) -> None:
    """Rank 0's shard is cut the way the task cuts it in the ranks (every rank has as many steps
    per epoch): no full batch means no step, which the ranks would only find after launch."""
    batches = make_task(data).shard(0, cfg.workers, cfg.batch_size, cfg.seed, None)
    if batches.steps_per_epoch >= 1:
        return
    # Stand-in knobs size the data only when the stand-in is what was loaded.
    relevant = [key for key in DATA_SIZE_KNOBS if cfg.dataset.get(key) is not None
                and not (key.startswith("stand_in") and data.source == REAL)]
    sized_by = "".join(f", or {DATA_SIZE_KNOBS[key]} dataset.{key}" for key in relevant)
    raise ConfigError(
        f"batch_size={cfg.batch_size} leaves each of workers={cfg.workers} without a batch: a worker's shard of "
        f"dataset={cfg.dataset.get('name', '?')} holds {batches.examples} examples per epoch; lower batch_size or "
        f"workers{sized_by}"
    )
