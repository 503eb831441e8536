"""The laptop convergence sweep of `make endtoend`: the runs its steps ratio is read from
(steps_ratio.py; conf/experiment/endtoend/convergence.yaml). It trains the study's methods, the
dense baselines and the sparsifiers the break-even is priced for, so every cell of the page can
have a verdict."""
from __future__ import annotations

from experiments.studies.endtoend.studies import CALIBRATED, StudySpec
from experiments.studies.reproduce.studies import Sweep

EXPERIMENT = "experiment=endtoend/convergence"
FOLDER = "convergence"
# The test suite's: the bundled digits (no download), a few steps, dense and DEFT (the quickstart
# study's sparsifier, so its cells get verdicts), three seeds.
QUICK = ("dataset=digits", "epochs=4", "max_steps=40", "eval_every_steps=4", "sparsifier=dense,deft", "seed=0,1,2")
# Each half's job numbers start apart, so their run directories (<num>_<method>_w4_s<seed>) never collide.
SUBDIR = "hydra.sweep.subdir={half}${{hydra.job.num}}_${{hydra:runtime.choices.sparsifier}}_w${{workers}}_s${{seed}}"


def halves(specs: list[StudySpec]) -> tuple[str, str]:
    """The studies' dense baselines, then their sparsifiers: two sweeps of about one length (a
    sparsifier's step costs more, and there are as many of each), so `make endtoend` runs them
    two at a time, both into the one folder the steps ratio is read from."""
    dense = [m for spec in specs for m in spec.methods.split(",")]
    sparse = [m for spec in specs for m in (*spec.sparsifiers, *CALIBRATED)]
    return ",".join(dict.fromkeys(dense)), ",".join(dict.fromkeys(sparse))


def convergence_sweeps(specs: list[StudySpec], quick: bool) -> tuple[Sweep, ...]:
    """The sweeps into `<out>/convergence`: the quick one (dense and DEFT on digits), or the
    studies' methods in two halves."""
    if quick:
        return (Sweep("convergence (steps ratio)", FOLDER, (EXPERIMENT, *QUICK), "the steps ratio to the target"),)
    return tuple(Sweep(f"convergence (steps ratio), part {n + 1}", FOLDER,
                       (EXPERIMENT, f"sparsifier={methods}", SUBDIR.format(half=f"{n}_")),
                       "the steps ratio to the target") for n, methods in enumerate(halves(specs)))
