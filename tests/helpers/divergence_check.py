"""Two gloo processes whose parameters differ: the cross-rank checksum must raise on both. NaN
on both is non-finite parameters (NaN never equals NaN: no difference); NaN on one only is a
real difference.

    torchrun --nproc-per-node=2 tests/helpers/divergence_check.py OUT
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from experiments.engine.core.finite import NonFiniteValue  # noqa: E402
from experiments.engine.rank.train import ReplicasDiverged, _check_replicas_agree  # noqa: E402
from experiments.engine.rank.worker import exit_now  # noqa: E402
from experiments.engine.core.world import close_world, init_world  # noqa: E402


def main(out: Path) -> None:
    world = init_world(2, "cpu", "gloo", timeout_s=60)
    try:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        _check_replicas_agree(world, model, step=0)  # identical replicas: silent
        if world.process_index == 1:
            with torch.no_grad():
                model.bias[0] += 1e-6  # one replica drifts by one tiny update
        try:
            _check_replicas_agree(world, model, step=7)
        except ReplicasDiverged as error:
            (out / f"diverged.{world.process_index}").write_text(str(error))
        with torch.no_grad():
            model.bias[0] = float("nan")  # on both: the same update overflowed everywhere
        try:
            _check_replicas_agree(world, model, step=8)
        except NonFiniteValue as error:
            (out / f"non_finite.{world.process_index}").write_text(str(error))
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        if world.process_index == 1:
            with torch.no_grad():
                model.weight[0, 0] = float("inf")  # on one only: the processes really differ
        try:
            _check_replicas_agree(world, model, step=9)
        except ReplicasDiverged as error:
            (out / f"one_non_finite.{world.process_index}").write_text(str(error))
    finally:
        close_world(wait_for_peers=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
    exit_now()  # as the real worker does: no interpreter finalization after gloo
