"""The studies `make endtoend` runs and models: each a set of `python run.py -m` command lines
(conf/experiment/endtoend/), the window of steps its statistics are read from, and the target.

A study has two kinds of runs:

- accuracy runs: every method at one hosted W, evaluated every few steps; the curve gives the
  steps to the target, and the statistics at that W;
- statistics runs: the sparsifiers at larger hosted W, only the steps of the window; with the
  accuracy runs they are the hosted points the extrapolation is fitted on. The dense baselines
  need none: what they send does not depend on the data.

MiCRO and ExDyna start from a calibrated threshold (`sparsifier.threshold_start=calibrated`):
from the released start their threshold needs hundreds of steps to reach its level, which a short
window would read as their steady state (make reproduce measures that transient).
"""
from __future__ import annotations

from dataclasses import dataclass

from experiments.reproduce.studies import Sweep

CALIBRATED = ("micro", "exdyna")  # one sweep each: the default sparsifier has no threshold_start


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

    def sweeps(self, quick: bool = False) -> tuple[Sweep, ...]:
        extra = self.quick_accuracy if quick else ()
        sweeps = [Sweep(f"{self.name}: accuracy runs", self.name, (f"experiment={self.accuracy}", *extra),
                        f"steps to {self.target:g} {self.metric}")]
        calibrated = () if quick else CALIBRATED  # the cut-down run leaves them out
        sweeps += [Sweep(f"{self.name}: accuracy, {method}", self.name,
                         (f"experiment={self.accuracy}", f"sparsifier={method}",
                          "sparsifier.threshold_start=calibrated", *extra), "from a calibrated start")
                   for method in calibrated]
        extra = self.quick_statistics if quick else ()
        sweeps.append(Sweep(f"{self.name}: statistics runs", self.name, (f"experiment={self.statistics}", *extra),
                            "|U|, k_max and selection time at larger W"))
        sweeps += [Sweep(f"{self.name}: statistics, {method}", self.name,
                         (f"experiment={self.statistics}", f"sparsifier={method}",
                          "sparsifier.threshold_start=calibrated", *extra), "from a calibrated start")
                   for method in calibrated]
        return tuple(sweeps)


QUICKSTART = StudySpec(
    name="quickstart", title="the quickstart workload (CNN, Fashion-MNIST, 71,802 parameters)",
    accuracy="endtoend/quickstart", statistics="endtoend/quickstart_statistics", accuracy_workers=4,
    settle=10, until=40, metric="eval/accuracy", target=0.80,
    # a split method with a plan, dense (and its overlapped twin), PowerSGD's bucketed exchange;
    # DEFT first: its accuracy run is job 0 at W = 2, as its first statistics run is (below)
    quick_accuracy=("dataset=digits", "eval_every_steps=8", "workers=2", "logger=local", "eval_limit=null",
                    "sparsifier=deft,dense,powersgd"),
    # statistics at the accuracy W too, as the full study's at W = 4: both sweeps write job 0 at
    # that W into one folder, which the statistics runs' names (with the seed) keep apart
    quick_statistics=("dataset=digits", "max_steps=14", "workers=2,4", "seed=0,1", "logger=local", "sparsifier=deft"))
RESNET18 = StudySpec(
    name="resnet18", title="ResNet-18 at laptop scale (Fashion-MNIST, 11,172,810 parameters)",
    accuracy="endtoend/resnet18", statistics="endtoend/resnet18_statistics", accuracy_workers=2,
    settle=4, until=12, metric="eval/accuracy", target=0.50, stands_for="resnet18_cifar10")
STUDIES = {study.name: study for study in (QUICKSTART, RESNET18)}
