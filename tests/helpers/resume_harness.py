"""Trains every sparsifier three ways in one world, to test exact resume with the real code:

    A  uninterrupted, in run directory OUT/<case>/uninterrupted
    B  in OUT/<case>/interrupted: stopped at STOPS[0], continued from its newest checkpoint,
       stopped again at STOPS[1], continued again to the end

Each attempt is what a rank process does (`experiments.engine.rank.worker.train_run` in a run directory
that `experiments.engine.launcher.launch.prepare_run_dir` prepared): load the newest checkpoint every process
has, move the metrics logged after it aside, train, write the summary. A stop is an exception
raised on every process right before the step runs, like a job killed there: what it had
logged stays in metrics.jsonl, and only complete checkpoints count.

    python tests/helpers/resume_harness.py OUT --workers 4                       # one process, hosted
    torchrun --nproc-per-node=2 tests/helpers/resume_harness.py OUT --workers 2  # two processes

tests/test_resume.py compares A and B file by file.
"""
from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

import torch
from omegaconf import open_dict

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import experiments.engine.rank.train  # noqa: E402
from experiments.engine.core.eager import stand_in_for_dynamo_twins  # noqa: E402
from experiments.engine.launcher.launch import prepare_run_dir  # noqa: E402
from experiments.runformat.run_dir import ENV
from experiments.runformat.store import RunStore  # noqa: E402
from experiments.engine.rank.worker import exit_now, train_run  # noqa: E402
from experiments.engine.core.world import close_world, init_world  # noqa: E402
from tests.helpers.compose_cache import compose_cached  # noqa: E402
from tests.helpers.harness import spec_overrides  # noqa: E402

TINY = ["dataset=digits", "model=mlp", "model.hidden=32", "batch_size=32", "logger=local", "logger.log_every=1",
        "logger.progress=false", "warmup_steps=0", "epochs=2", "checkpoint.every_steps=5", "checkpoint.keep=2"]


# Other tasks, as `<method>+<task>`: the LSTM carries hidden state between steps and draws
# dropout from the process's RNG.
TASKS = {
    "lstm": ["dataset=wikitext2", "dataset.if_missing=stand_in", "dataset.stand_in_verses=1000", "model=lstm",
             "model.hidden=16", "model.layers=2", "batch_size=4"],
}


class Interrupted(Exception):
    """The stand-in for a kill: raised on every process before a chosen step."""


def stopping_at(step_to_stop: int, real):
    """`real` (train_step), raising Interrupted right before `step_to_stop`."""
    signature = inspect.signature(real)

    def train_step(*args, **kwargs):
        if signature.bind(*args, **kwargs).arguments["step"] == step_to_stop:
            raise Interrupted(f"stopped before step {step_to_stop}")
        return real(*args, **kwargs)

    return train_step


def prepared(cfg, run_dir: Path, world) -> tuple[RunStore, dict]:
    """Process 0 prepares the run directory as run.py does; the others wait for it."""
    if world.process_index == 0:
        prepare_run_dir(cfg, run_dir, {"name": run_dir.name, "group": "resume", "num": None, "overrides": [], "choices": {}})
    world.comm.gather_stats(torch.zeros(1, 1, dtype=torch.float64))
    store = RunStore(run_dir)
    return store, store.read_json(ENV)


def run_method(case: str, workers: int, processes: int, stops: list[int], out: Path, world) -> None:
    """`case`: a sparsifier spec (`micro`, or with knobs: `micro:threshold_start=calibrated`),
    optionally `+<task>`."""
    spec, *task = case.split("+")
    cfg = compose_cached([*spec_overrides(spec), f"workers={workers}", f"processes={processes}", *TINY,
                          *(TASKS[task[0]] if task else [])])
    out = out / case
    with open_dict(cfg):
        del cfg["hydra"]
    store, env = prepared(cfg, out / "uninterrupted", world)
    train_run(store, cfg, env, world)

    store, env = prepared(cfg, out / "interrupted", world)
    real = experiments.engine.rank.train.train_step
    try:
        for stop in stops:
            experiments.engine.rank.train.train_step = stopping_at(stop, real)
            try:
                train_run(store, cfg, env, world)
                raise AssertionError(f"{case}: the run did not reach step {stop}")
            except Interrupted:
                pass
    finally:
        experiments.engine.rank.train.train_step = real
    train_run(store, cfg, env, world)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--methods", required=True,
                        help="comma-separated conf/sparsifier/ options, with knobs (micro:threshold_start=calibrated), or <option>+lstm")
    parser.add_argument("--stops", default="13,18", help="steps before which the interrupted run stops")
    args = parser.parse_args()
    torch.set_num_threads(1)
    stand_in_for_dynamo_twins(torch.optim.Optimizer)  # as a rank does (worker.py): nothing here compiles
    world = init_world(args.workers, "cpu", "gloo", 120)
    try:
        for case in args.methods.split(","):
            run_method(case, args.workers, world.processes, [int(s) for s in args.stops.split(",")], args.out, world)
    finally:
        close_world(wait_for_peers=True)


if __name__ == "__main__":
    main()
    exit_now()
