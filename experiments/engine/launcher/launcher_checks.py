"""Checks of the launcher section before launch: restarts, threads, and the rendezvous.

A rendezvous that cannot complete (launcher.nnodes=2 with a port only this node knows, or the
other node never started) must not wait silently: torchrun's join timeout is set from
`launcher.rdzv_timeout_s` (launch.py's rank_command), and an endpoint that no other node can
reach is refused here.
"""
from __future__ import annotations

from omegaconf import DictConfig

from experiments.runformat.errors import require

RDZV_BACKENDS = ("c10d", "static", "etcd", "etcd-v2")  # torchrun's --rdzv-backend choices


def endpoint_port(endpoint: str) -> int | None:
    """The port of `host:port` (IPv6 hosts in brackets), or None if it is not of that form."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        return None
    return int(port)


def check_launcher(cfg: DictConfig) -> None:
    """Raises ConfigError naming the launcher key and the fix."""
    launcher = cfg.launcher
    require(launcher.max_restarts >= 0, f"launcher.max_restarts must be >= 0, got {launcher.max_restarts}: set e.g. launcher.max_restarts=0")
    require(
        launcher.threads_per_process is None or launcher.threads_per_process >= 1,
        f"launcher.threads_per_process must be >= 1 or null (cores / processes), got {launcher.threads_per_process}",
    )
    require(
        launcher.rdzv_backend in RDZV_BACKENDS,
        f"launcher.rdzv_backend must be one of {', '.join(RDZV_BACKENDS)}, got {launcher.rdzv_backend}: c10d is the default",
    )
    require(
        launcher.rdzv_timeout_s > 0,
        f"launcher.rdzv_timeout_s must be > 0, got {launcher.rdzv_timeout_s}: set e.g. launcher.rdzv_timeout_s=600",
    )
    port = endpoint_port(launcher.rdzv_endpoint)
    require(
        port is not None,
        f"launcher.rdzv_endpoint must be host:port, got {launcher.rdzv_endpoint!r}: set e.g. launcher.rdzv_endpoint="
        + ("localhost:0" if launcher.nnodes == 1 else "<node0-host>:29400"),
    )
    require(
        launcher.nnodes == 1 or port != 0,
        f"launcher.nnodes={launcher.nnodes} needs a port every node can reach: set launcher.rdzv_endpoint=<node 0's host>:29400 "
        f"(port 0 picks a free port only this node knows, so the other nodes would never join)",
    )


def rendezvous_error(cfg: DictConfig, elapsed_s: float) -> str | None:
    """The failure to report when a multi-node job ended with no rank error after the join
    timeout: the other nodes never joined (torchrun's RendezvousTimeoutError). None otherwise."""
    launcher = cfg.launcher
    if launcher.nnodes == 1 or elapsed_s < launcher.rdzv_timeout_s:
        return None
    return (
        f"the rendezvous at {launcher.rdzv_endpoint} did not complete within launcher.rdzv_timeout_s="
        f"{launcher.rdzv_timeout_s} s: launcher.nnodes={launcher.nnodes}, so start the same command on every node "
        f"(same launcher.rdzv_endpoint and rdzv_id), or set launcher.nnodes=1"
    )
