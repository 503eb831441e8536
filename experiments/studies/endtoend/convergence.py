"""The laptop convergence sweep of `make endtoend`: the runs its steps ratio is read from
(steps_ratio.py; conf/experiment/endtoend/convergence.yaml)."""
from __future__ import annotations

from experiments.studies.reproduce.studies import Sweep

EXPERIMENT = "experiment=endtoend/convergence"
FOLDER = "convergence"
WORKLOAD = "MLP on Fashion-MNIST (the laptop workload), W = 4 hosted ranks"
# The test suite's: the bundled digits (no download), a few steps, two methods, three seeds.
QUICK = ("dataset=digits", "epochs=4", "max_steps=40", "eval_every_steps=4", "sparsifier=dense,topk", "seed=0,1,2")
# Two halves of the experiment's methods, so `make endtoend` runs them two at a time; both write
# the one folder the steps ratio is read from (the dense baselines in the first).
HALVES = ("dense,dense_bf16,dense_fp16,powersgd,topk", "cltk,dgc,deft,micro,exdyna")
# Each half's job numbers start apart, so their run directories (<num>_<method>_w4_s<seed>) never collide.
SUBDIR = "hydra.sweep.subdir={half}${{hydra.job.num}}_${{hydra:runtime.choices.sparsifier}}_w${{workers}}_s${{seed}}"


def convergence_sweeps(quick: bool) -> tuple[Sweep, ...]:
    """The sweeps into `<out>/convergence`: the quick one (two methods, digits), or the
    experiment's methods in two halves."""
    if quick:
        return (Sweep("convergence (steps ratio)", FOLDER, (EXPERIMENT, *QUICK), "the steps ratio to the target"),)
    return tuple(Sweep(f"convergence (steps ratio), part {n + 1}", FOLDER,
                       (EXPERIMENT, f"sparsifier={methods}", SUBDIR.format(half=f"{n}_")),
                       "the steps ratio to the target") for n, methods in enumerate(HALVES))
