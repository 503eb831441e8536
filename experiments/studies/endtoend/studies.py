"""The studies `make endtoend` runs and models: each a set of `python run.py -m` command lines
(conf/experiment/endtoend/), the window of steps its statistics are read from, and the target.

A study has two kinds of runs:

- accuracy runs: every method at one hosted W, evaluated every few steps; the curve gives the
  steps to the target, and the statistics at that W;
- statistics runs: the sparsifiers at larger hosted W, only the steps of the window; with the
  accuracy runs they are the hosted points the extrapolation is fitted on. The dense baselines
  need none: what they send does not depend on the data.

Each sweep writes its own folder, `<out>/<study>/<sweep>` (its run.log, Hydra's multirun.yaml,
its report): make endtoend runs two sweeps at a time, and the study's model reads every run
below `<out>/<study>` (assemble.py).

MiCRO and ExDyna start from a calibrated threshold (`sparsifier.threshold_start=calibrated`):
from the released start their threshold needs hundreds of steps to reach its level, which a short
window would read as their steady state (make reproduce measures that transient).
"""
from __future__ import annotations

from dataclasses import dataclass

from experiments.studies.reproduce.studies import Sweep
from sparsifiers.registry import names

# The methods with a threshold_start: one sweep each (the default sparsifier has no threshold_start).
CALIBRATED = names(calibrated_start=True)


@dataclass(frozen=True)
class StudySpec:
    name: str
    title: str
    accuracy: str  # the experiment of the accuracy runs
    statistics: str  # the experiment of the statistics runs
    accuracy_workers: int
    settle: int  # statistics are read from steps [settle, until)
    until: int
    metric: str
    target: float  # the headline metric a method must reach
    # The test suite's cut-down version, appended to the accuracy and the statistics sweeps.
    quick_accuracy: tuple[str, ...] = ()
    quick_statistics: tuple[str, ...] = ()
    # The measured workload (conf/compute_profile/*.yaml `measured_ms`) whose step this study's
    # stands for on a modelled GPU: the same model at the papers' batch and input.
    stands_for: str | None = None

    def sweeps(self, quick: bool = False, target: float | None = None) -> tuple[Sweep, ...]:
        """The accuracy and the statistics sweeps first (the study's longest), then each calibrated
        method's two (a few runs each): taken in this order two at a time, they end together. The
        accuracy runs stop at `target` (default: the study's)."""
        accuracy, statistics = self.quick_accuracy if quick else (), self.quick_statistics if quick else ()
        value = self.target if target is None else target
        target = f"eval_target={value:g}"  # where they stop (experiments/engine/rank/target.py)
        sweeps = [Sweep(f"{self.name}: accuracy runs", f"{self.name}/accuracy",
                        (f"experiment={self.accuracy}", target, *accuracy), f"steps to {value:g} {self.metric}"),
                  Sweep(f"{self.name}: statistics runs", f"{self.name}/statistics",
                        (f"experiment={self.statistics}", *statistics), "|U|, k_max and selection time at larger W")]
        for method in () if quick else CALIBRATED:  # the cut-down run leaves them out
            start = (f"sparsifier={method}", "sparsifier.threshold_start=calibrated")
            sweeps += [Sweep(f"{self.name}: accuracy, {method}", f"{self.name}/accuracy_{method}",
                             (f"experiment={self.accuracy}", target, *start, *accuracy), "from a calibrated start"),
                       Sweep(f"{self.name}: statistics, {method}", f"{self.name}/statistics_{method}",
                             (f"experiment={self.statistics}", *start, *statistics), "from a calibrated start")]
        return tuple(sweeps)


QUICKSTART = StudySpec(
    name="quickstart", title="the quickstart workload (CNN, Fashion-MNIST, 71,802 parameters)",
    accuracy="endtoend/quickstart", statistics="endtoend/quickstart_statistics", accuracy_workers=4,
    settle=10, until=40, metric="eval/accuracy", target=0.80,
    # a split method with a plan, dense (and its overlapped twin), PowerSGD's bucketed exchange;
    # DEFT first: its accuracy run is job 0 at W = 2, as its first statistics run is (below)
    # two seeds: an interval to compute, in half the runs of three
    quick_accuracy=("dataset=digits", "eval_every_steps=8", "workers=2", "logger=local", "eval_limit=null",
                    "sparsifier=deft,dense,powersgd", "seed=0,1"),
    # statistics at the accuracy W too, as the full study's at W = 4 (each sweep in its own folder)
    quick_statistics=("dataset=digits", "max_steps=14", "workers=2,4", "seed=0,1", "logger=local", "sparsifier=deft"))
RESNET18 = StudySpec(
    name="resnet18", title="ResNet-18 at laptop scale (Fashion-MNIST, 11,172,810 parameters)",
    accuracy="endtoend/resnet18", statistics="endtoend/resnet18_statistics", accuracy_workers=2,
    settle=2, until=5, metric="eval/accuracy", target=0.40, stands_for="resnet18_cifar10")
STUDIES = {study.name: study for study in (QUICKSTART, RESNET18)}
