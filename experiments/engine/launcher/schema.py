"""The run config's schema, registered in Hydra's ConfigStore as `run_schema`.

Typed fields make a typo (`worker=4`) or a wrong type (`workers=four`) fail at composition.
Group nodes (sparsifier, model, dataset, optimizer) are built by `_target_`, so their knobs are
checked against the target's signature in validate.py instead.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf


@dataclass
class LauncherConfig:
    """How ranks are started: torchrun on one node or several (c10d rendezvous)."""

    name: str = "torchrun"
    nnodes: int = 1  # >1: run the same command on every node with the same rdzv_endpoint
    rdzv_backend: str = "c10d"
    rdzv_endpoint: str = "localhost:0"  # host:port of node 0; port 0 picks a free one (one node)
    rdzv_id: Optional[str] = None  # None: a hash of the resolved config, alike on every node
    max_restarts: int = 0  # never restart silently: a restart would corrupt timings
    backend: str = "auto"  # auto: nccl when the ranks run on GPUs, gloo otherwise
    timeout_s: int = 300  # process-group timeout: a hung collective fails the run after this
    rdzv_timeout_s: int = 600  # torchrun's join timeout: a node that never joins fails the run after this
    threads_per_process: Optional[int] = None  # None: cores / processes (at least 1)


@dataclass
class LoggerConfig:
    """Where metrics go besides the local results store."""

    name: str = "wandb_offline"
    wandb_mode: str = "offline"  # offline | online | disabled (WANDB_MODE in the environment wins)
    project: str = "sparsebench"
    entity: Optional[str] = None
    log_every: int = 10  # steps between metric rows (the summary uses every logged row)
    progress: bool = True  # a progress bar on rank 0


@dataclass
class NetworkConfig:
    """The cluster model that turns each step's traffic into time/exchange_model_ms
    (experiments/engine/core/network.py, docs/network.md)."""

    name: str = "10gbe"
    latency_us: float = 25.0  # inter-node alpha, microseconds per message
    bandwidth_gbit: float = 10.0  # inter-node beta, Gbit/s per node and direction
    gpus_per_node: int = 1  # ranks per node; 1: every rank its own node (the flat model)
    intra_latency_us: Optional[float] = None  # intra-node alpha; null when gpus_per_node is 1
    intra_bandwidth_gbit: Optional[float] = None  # intra-node beta, Gbit/s per GPU and direction
    algorithm: str = "ring"  # auto (NCCL-like: cheapest) | ring | hierarchical | tree
    efficiency: float = 1.0  # inter beta = efficiency x line rate (what NCCL reaches), in (0, 1]
    intra_efficiency: float = 1.0  # intra beta = intra_efficiency x line rate, in (0, 1]
    nics_per_node: int = 1  # bandwidth_gbit is one NIC's; a node's flows share all its NICs
    bf16: bool = True  # the nodes' GPUs have bf16 (false on V100: the 16-bit dense baseline is fp16)


@dataclass
class CheckpointConfig:
    """Run-level checkpoints (experiments/engine/rank/checkpoint.py): what `python run.py resume=DIR` and
    torchrun's restarts continue from."""

    every_steps: int = 0  # also every this many steps (0: only at epoch ends)
    epoch_end: bool = True  # at the end of every epoch but the last
    keep: int = 2  # the newest this many are kept


@dataclass
class RunConfig:
    """Top level: what to train, on how many workers, for how long."""

    sparsifier: Any = MISSING
    model: Any = MISSING
    dataset: Any = MISSING
    optimizer: Any = MISSING
    schedule: Any = MISSING  # learning-rate schedule over (fractional) epochs
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    workers: int = 4  # data-parallel workers W
    processes: Optional[int] = None  # torchrun processes; None: one per worker
    epochs: int = 1
    max_steps: Optional[int] = None  # ends the run after this many steps (smoke runs, tests)
    batch_size: int = 32  # per worker
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda
    data_dir: str = "data"
    output_root: str = "outputs"
    warmup_steps: int = 5  # steps left out of timing summaries
    checksum_every: int = 50  # steps between cross-rank parameter checks (0: never)
    eval_every_steps: int = 0  # also evaluate every this many steps (time-to-accuracy); 0: at epoch ends only
    eval_target: Optional[float] = None  # a headline metric value: evaluate more often near it (experiments/engine/rank/target.py)
    eval_near: float = 0.05  # from the first evaluation within this of eval_target on, every eval_near_every steps
    eval_near_every: int = 5
    stop_at_target: bool = False  # end the run at the first evaluation that reaches eval_target
    position_bins: int = 0  # histograms of where U and rank 0's acc lie, on logging steps; 0: never
    eval_limit: Optional[int] = None  # evaluate on the first this-many test examples (smoke runs); None: all
    kernels: str = "auto"  # selection kernels: auto | torch (the reference) | compiled (numba)
    reduction: str = "ring"  # ring (gloo's all-reduce) | rank_order (bitwise equal however ranks are hosted)
    on_nonfinite: str = "fail"  # fail | skip: a step with a non-finite loss, gradient or aggregate
    max_skipped_steps: int = 10  # skip: more skipped steps in a row than this fail the run
    tag: str = ""  # free text recorded with the run (experiment files name their paper figure)


def _per_worker(total: int, *, _root_: Any) -> int:
    """`${per_worker:1048576}`: a global batch split over the workers (NCF's 2^20)."""
    return max(1, int(total) // int(_root_.workers))


def register() -> None:
    ConfigStore.instance().store(name="run_schema", node=RunConfig)
    if not OmegaConf.has_resolver("per_worker"):
        OmegaConf.register_new_resolver("per_worker", _per_worker)
