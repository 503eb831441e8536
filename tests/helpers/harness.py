"""Runs sparsifiers for a few real training steps in one world and saves what happened, so that
tests can compare ranks, processes and worlds. Uses the real set-up and step of experiments/.

    torchrun --nproc-per-node=P tests/helpers/harness.py OUT --workers W --methods topk,dense --steps 6
    python tests/helpers/harness.py OUT --workers W ...     # one process hosting all W ranks

Writes OUT/<method>.process<p>.pt with, per step, every hosted rank's selection (sorted) and
loss, the exchange counts and |U|, rank 0's sparsifier metrics, and at the end the parameters.
`--reduction rank_order` runs the world in the deterministic reduction mode (collectives.py);
`--record-steps` adds every step's accumulators, aggregate, residuals and collectives.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from experiments.engine.core.eager import stand_in_for_dynamo_twins  # noqa: E402
from experiments.engine.core.step import train_step  # noqa: E402
from experiments.engine.rank.train import build_session  # noqa: E402
from experiments.engine.rank.worker import exit_now  # noqa: E402
from experiments.engine.core.world import close_world, init_world  # noqa: E402
from sparsifiers.common.kernels import current_backend  # noqa: E402
from tests.helpers.compose_cache import compose_cached  # noqa: E402
from tests.helpers.step_recorder import record_steps  # noqa: E402

TINY = ["dataset=synthetic", "dataset.num_train=512", "dataset.num_test=64", "model=mlp", "model.hidden=32", "batch_size=8"]


# Spec knobs that are the world's, not the sparsifier's: `micro:reduction=ring`.
WORLD_KNOBS = ("reduction",)


def spec_overrides(spec: str) -> list[str]:
    """The overrides of a spec, a sparsifier option with knobs (`topk:exchange=sparse_allgather`):
    the option, its knobs under `sparsifier.`, and the world's (WORLD_KNOBS) as they are."""
    method, *knobs = spec.split(":")
    return [f"sparsifier={method}", *(k if k.split("=")[0] in WORLD_KNOBS else f"sparsifier.{k}" for k in knobs)]


def run_method(spec: str, workers: int, steps: int, extra: list[str], world, record_tensors: bool = False) -> dict:
    """`spec` is a sparsifier option, optionally with knobs: `topk:exchange=sparse_allgather`;
    `reduction=ring` among them sets the world's reduction mode for this method only."""
    cfg = compose_cached([f"workers={workers}", *TINY, *extra, *spec_overrides(spec)])  # the spec's knobs win
    default_reduction, world.comm.reduction = world.comm.reduction, cfg.reduction
    try:
        return _run(cfg, steps, world, record_tensors)
    finally:
        world.comm.reduction = default_reduction


def _run(cfg, steps: int, world, record_tensors: bool) -> dict:
    session = build_session(cfg, world)
    record = {"selections": [], "counts": [], "aggregated": [], "metrics": [], "exchange": [], "losses": []}
    epoch_batches = [iter(r.batches.epoch(0)) for r in session.replicas]
    for sparsifier in session.ranks.sparsifiers:
        sparsifier.start_epoch(0, session.replicas[0].batches.steps_per_epoch)
    recording = record_steps() if record_tensors else contextlib.nullcontext([])
    with recording as recorded:
        for step in range(steps):
            _one_step(world, session, epoch_batches, step, record)
    for recorded_step in recorded:
        recorded_step.parameter_sizes = [p.numel() for p in session.model.parameters()]
        recorded_step.parameter_shapes = [tuple(p.shape) for p in session.model.parameters()]  # PowerSGD's matrices
    record["steps"] = recorded  # with --record-steps: what every step did (tests/helpers/step_recorder.py)
    record["params"] = torch.cat([p.detach().cpu().flatten() for p in session.model.parameters()])
    record["local_ranks"] = list(world.local_ranks)
    record["steps_per_epoch"] = session.replicas[0].batches.steps_per_epoch
    record["kernels"] = current_backend()  # what the run's `kernels` key set
    return record


def _one_step(world, session, epoch_batches, step: int, record: dict) -> None:
    """One train_step of every hosted rank, and what the tests compare across worlds."""
    world.comm.meter.reset()
    batches = [next(iterator) for iterator in epoch_batches]
    outcome = train_step(session.ranks, session.model, session.task, session.optimizer,
                         session.replicas, batches, step, measure_norms=False)
    record["selections"].append({
        replica.rank: (None if selection is None else torch.sort(selection.detach().cpu().long()).values)
        for replica, selection in zip(session.replicas, outcome.selections)
    })
    record["losses"].append({replica.rank: loss for replica, loss in zip(session.replicas, outcome.losses)})
    record["counts"].append(outcome.result.counts.clone())
    record["aggregated"].append(outcome.result.aggregated)
    record["metrics"].append(session.method.metrics())
    record["exchange"].append(session.ranks.metrics(outcome.sparsified))


def result_name(spec: str) -> str:
    return spec.replace(":", "__").replace("=", "-")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--methods", required=True)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--reduction", default="ring", help="ring | rank_order (collectives.py)")
    parser.add_argument("--record-steps", action="store_true",
                        help="also save every step's tensors, collectives and timings (tests/helpers/step_recorder.py)")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_intermixed_args()  # overrides may follow the options
    torch.set_num_threads(1)
    stand_in_for_dynamo_twins(torch.optim.Optimizer)  # as a rank does (worker.py): nothing here compiles
    world = init_world(args.workers, "cpu", "gloo", timeout_s=120, reduction=args.reduction)
    overrides = [*args.overrides, f"reduction={args.reduction}"]
    finished = False
    try:
        for spec in args.methods.split(","):
            record = run_method(spec, args.workers, args.steps, overrides, world, args.record_steps)
            torch.save(record, Path(args.out) / f"{result_name(spec)}.process{world.process_index}.pt")
        finished = True
    finally:
        close_world(wait_for_peers=finished)
    exit_now()  # as the real worker does: no interpreter finalization after gloo (worker.py)


if __name__ == "__main__":
    main()
