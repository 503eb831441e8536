"""Entry point of every rank-hosting process: `python -m experiments.engine.rank.worker RUN_DIR`.

torchrun starts it (or run.py directly, for one process). It reads the resolved config and
env.json that run.py wrote; it never composes a config itself (no @hydra.main in ranks: that
would make one output directory per rank). An exception is written to error.rank<P>.txt for
run.py to report, and the process group is always destroyed at exit.
"""
from __future__ import annotations

import os
import signal
import sys
import traceback

import torch
from omegaconf import OmegaConf

from experiments.runformat import run_dir as run_files
from experiments.engine.rank.checkpoint import load_agreed
from experiments.runformat.console import close_bars, line_start, route_warnings
from experiments.engine.core.eager import stand_in_for_dynamo_twins
from experiments.engine.rank.lifetime import die_with_parent, mark_orphaned, outlived
from experiments.engine.core.network import NetworkModel
from experiments.engine.rank.nodes import ENV_FILE_VARIABLE, record_rank_zero
from experiments.runformat.runtime import Runtime
from experiments.engine.rank.sinks import JsonlSink, MultiSink, NullSink, WandbSink
from experiments.runformat.run_dir import CONFIG, ENV, SUMMARY
from experiments.runformat.store import RunStore
from experiments.engine.rank.train import train
from experiments.engine.core.world import World, close_world, init_world


def make_sink(cfg, world: World, store: RunStore, env: dict, runtime: Runtime):
    """Rank 0 logs to the local store and W&B; every other process logs nothing."""
    if not world.hosts_rank_zero:
        return NullSink()
    sinks = [JsonlSink(store.open_metrics())]
    mode = runtime.wandb_mode
    if mode != "disabled":
        job = env["job"]
        sinks.append(
            WandbSink(
                run_dir=store.dir,
                mode=mode,
                project=cfg.logger.project,
                entity=cfg.logger.entity,
                name=job["name"],
                group=job["group"],
                run_id=job.get("wandb_id"),
                # the machine too (env.json's device and versions; `device` is a config key
                # already): runs from different CPUs are told apart in W&B as locally
                config={**OmegaConf.to_container(cfg, resolve=True), "resolved": env["resolved"],
                        "machine": env.get("device"), "versions": env.get("versions")},
                tags=[cfg.sparsifier.name, f"W{cfg.workers}", runtime.world],
            )
        )
    return MultiSink(sinks)


def watch_run_py() -> None:
    """The single worker, started by run.py itself: when run.py dies the kernel sends SIGTERM
    (lifetime.py), and this process, the job's only one, says so in status.json before it ends."""
    parent = os.getppid()

    def stop(signum, frame) -> None:
        if outlived(parent):  # else run.py, alive, passed its own signal on, and reports it
            mark_orphaned(parent, f"the worker process (pid {os.getpid()}) got {signal.Signals(signum).name} and ended")
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signum, signal.SIG_DFL)  # end by the signal itself: run.py's blame reads it
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, stop)
    die_with_parent(signal.SIGTERM)


def main(run_dir: str) -> None:
    if "WORLD_SIZE" in os.environ:
        # torchrun killed (even by SIGKILL) must not leave this rank training on, orphaned.
        die_with_parent(signal.SIGKILL)
    else:
        watch_run_py()
    route_warnings()  # whole lines above rank 0's progress bar (console.py)
    stand_in_for_dynamo_twins(torch.optim.Optimizer)  # a rank compiles nothing (eager.py)
    store = RunStore(run_dir)
    error_file = run_files.error_file(os.environ.get("RANK", "0"))
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if restart:  # torchrun restarted the job: the last attempt's error is not this one's
        store.set_aside([error_file], f"restart-{restart}")
    cfg = OmegaConf.load(store.path(CONFIG))
    env = store.read_json(os.environ.get(ENV_FILE_VARIABLE, ENV))  # a node's own env.<node>.json
    if os.environ.get("RANK", "0") == "0":
        record_rank_zero(store.dir)  # which node's run.py reports the run (nodes.py)
    runtime = Runtime.from_dict(env["resolved"], cfg.logger.wandb_mode)  # as run.py resolved it
    torch.set_num_threads(runtime.threads_per_process)
    failed = True
    try:
        network = NetworkModel.from_config(cfg.network)
        world = init_world(
            cfg.workers, runtime.device, runtime.backend, cfg.launcher.timeout_s, network, cfg.reduction
        )
        train_run(store, cfg, env, world)
        failed = False
    except BaseException:
        close_bars()  # erased before anything reports the failure (console.py)
        store.path(error_file).write_text(traceback.format_exc())
        raise
    finally:
        close_world(wait_for_peers=not failed)


def train_run(store: RunStore, cfg, env: dict, world: World) -> None:
    """This process's part of the run in a prepared run directory: continue from its newest
    checkpoint if it has one (resume=DIR, or a torchrun restart), log, train, write the summary."""
    runtime = Runtime.from_dict(env["resolved"], cfg.logger.wandb_mode)
    resumed = load_agreed(store.dir, world)
    if world.hosts_rank_zero:  # the steps after the checkpoint are logged again
        store.drop_metrics_from(0 if resumed is None else resumed.step)
    sink, failed = make_sink(cfg, world, store, env, runtime), True
    try:
        summary = train(cfg, world, sink, store.dir, resumed)
        if summary is not None:
            summary["wandb_mode"] = runtime.wandb_mode
            store.write_json(SUMMARY, summary)
        failed = False
    finally:
        sink.close(failed)


def exit_now(code: int = 0) -> None:
    """Ends a finished rank without interpreter finalization. Everything is already written and
    the process group destroyed, but gloo's worker threads can still hold tensors whose release
    at finalization takes the GIL of a dying interpreter and aborts (SIGABRT, seen here once in
    a few hundred runs; pytorch/pytorch#179291 describes it), which would mark a complete run
    failed. A failed rank ends the same way: after a collective timed out, finalization waited
    on gloo's threads for seconds (or for good, until torchrun killed the rank)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    try:
        main(sys.argv[1])
    except BaseException:
        # torchrun's log shows it; error.rank<P>.txt already holds it. One write, from column 0
        # of a clean line: another process's progress bar may be drawn on the current one.
        sys.stderr.write(line_start() + traceback.format_exc())
        exit_now(1)
    exit_now()
