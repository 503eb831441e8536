"""The laptop convergence sweep of `make endtoend`: the runs its steps ratio is read from
(steps_ratio.py; conf/experiment/endtoend/convergence.yaml)."""
from __future__ import annotations

from experiments.studies.reproduce.studies import Sweep

EXPERIMENT = "experiment=endtoend/convergence"
FOLDER = "convergence"
WORKLOAD = "MLP on Fashion-MNIST (the laptop workload), W = 4 hosted ranks"
# The test suite's: the bundled digits (no download), a few steps, two methods, three seeds.
QUICK = ("dataset=digits", "epochs=4", "max_steps=40", "eval_every_steps=4", "sparsifier=dense,topk", "seed=0,1,2")


def convergence_sweeps(quick: bool) -> tuple[Sweep, ...]:
    """One sweep (its folder `<out>/convergence`): every method and seed of the experiment file."""
    args = (EXPERIMENT, *(QUICK if quick else ()))
    return (Sweep("convergence (steps ratio)", FOLDER, args, "the steps ratio to the target"),)
