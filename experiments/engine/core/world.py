"""The world: which logical ranks this process hosts, on which device, and how they talk.

Started by torchrun, a process joins the process group (gloo on CPU, NCCL on GPU, always with a
timeout) and hosts W / P consecutive ranks. Started alone (P = 1), it hosts all W ranks and
makes no torch.distributed call. A run with one rank per process is `distributed`; a run whose
processes host several ranks each is `hosted`: their measured exchange times mean different
things and are never mixed.
"""
from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from experiments.engine.core.collectives import RankCollectives
from experiments.engine.core.network import NetworkModel
from experiments.runformat.runtime import world_kind


@dataclass
class World:
    world_size: int  # W logical ranks
    processes: int  # P
    process_index: int
    local_ranks: list[int]
    device: torch.device
    comm: RankCollectives

    @property
    def kind(self) -> str:
        return world_kind(self.world_size, self.processes)

    @property
    def hosts_rank_zero(self) -> bool:
        return 0 in self.local_ranks

    def synchronize(self) -> None:
        """Waits for queued device work: a timer must not measure a kernel still in the queue."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def init_world(
    workers: int,
    device_name: str,
    backend: str,
    timeout_s: int,
    network: NetworkModel | None = None,
    reduction: str = "ring",
) -> World:
    """Joins the process group if torchrun started us; otherwise hosts every rank here.
    `reduction`: how value reductions sum across ranks (collectives.py: ring | rank_order)."""
    if "WORLD_SIZE" in os.environ:
        processes = int(os.environ["WORLD_SIZE"])
        process_index = int(os.environ["RANK"])
        local_index = int(os.environ.get("LOCAL_RANK", 0))
    else:
        processes, process_index, local_index = 1, 0, 0
    device = torch.device(f"cuda:{local_index}" if device_name == "cuda" else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if processes > 1 or "WORLD_SIZE" in os.environ:
        timeout = datetime.timedelta(seconds=timeout_s)
        dist.init_process_group(
            backend=backend,
            store=_attempt_store(process_index, processes, timeout),
            rank=process_index,
            world_size=processes,
            timeout=timeout,
            device_id=device if device.type == "cuda" else None,
        )
    per_process = workers // processes
    local_ranks = list(range(process_index * per_process, (process_index + 1) * per_process))
    comm = RankCollectives(workers, local_ranks, use_process_group=processes > 1, network=network, reduction=reduction)
    return World(workers, processes, process_index, local_ranks, device, comm)


def _attempt_store(rank: int, world_size: int, timeout: datetime.timedelta) -> dist.Store:
    """torchrun's store, with keys of this attempt only. After a restart (launcher.max_restarts)
    the agent's store still holds the last attempt's keys, and gloo's rendezvous read a dead
    rank's address from it ("connectFullMesh failed ... Connection refused"): the restart
    count in the prefix keeps each attempt to its own keys."""
    agent_serves = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size,
                          is_master=rank == 0 and not agent_serves, timeout=timeout, multi_tenant=not agent_serves)
    return dist.PrefixStore(f"sparsebench/attempt{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}", store)


def close_world(wait_for_peers: bool = False) -> None:
    """Always called at exit: leaves the process group cleanly. After a successful run, first a
    barrier, so that no process tears down its connections while a peer still uses them (after
    a failure there is no barrier: the peers may be gone, and torchrun stops them anyway)."""
    if dist.is_available() and dist.is_initialized():
        if wait_for_peers:
            dist.barrier()
        dist.destroy_process_group()
