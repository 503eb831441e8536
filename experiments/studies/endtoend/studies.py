"""The studies `make endtoend` runs and models: each a set of `python run.py -m` command lines
(conf/experiment/endtoend/) and the window of steps its statistics are read from.

A study's runs are short statistics runs (no seeds, no accuracy: the per-step factor does not
depend on them, breakeven.py):

- every method at the smallest hosted W: its compute time, and the dense baselines' ledgers
  (what they send does not depend on the data, nor their ledger's shape on W);
- the sparsifiers at larger hosted W, only the steps of the window: the hosted points the
  extrapolation of |U|, k_max and selection is fitted on.

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
    experiment: str  # the study's model, data and per-worker batch
    statistics: str  # the experiment of the statistics runs
    base_workers: int  # the smallest hosted W: every method runs there
    methods: str  # every method but the calibrated ones (their own sweeps), comma-separated
    settle: int  # statistics are read from steps [settle, until)
    until: int
    metric: str
    # The test suite's cut-down version, appended to the base and the statistics sweeps.
    quick_base: tuple[str, ...] = ()
    quick_statistics: tuple[str, ...] = ()
    # The measured workload (conf/compute_profile/*.yaml `measured_ms`) whose step this study's
    # stands for on a modelled GPU: the same model at the papers' batch and input.
    stands_for: str | None = None

    def sweeps(self, quick: bool = False) -> tuple[Sweep, ...]:
        """The statistics sweep first (the study's longest), then every method at the smallest W,
        then each calibrated method's at every hosted W: taken in this order two at a time, they
        end together."""
        base, statistics = self.quick_base if quick else (), self.quick_statistics if quick else ()
        sweeps = [Sweep(f"{self.name}: statistics runs", f"{self.name}/statistics",
                        (f"experiment={self.statistics}", *statistics), "|U|, k_max and selection time at larger W"),
                  Sweep(f"{self.name}: every method at W = {self.base_workers}", f"{self.name}/base",
                        (f"experiment={self.statistics}", f"workers={self.base_workers}", f"sparsifier={self.methods}",
                         "seed=0", *base), "compute, and the dense baselines' ledgers")]
        for method in () if quick else CALIBRATED:  # the cut-down run leaves them out
            sweeps.append(Sweep(f"{self.name}: statistics, {method}", f"{self.name}/statistics_{method}",
                                (f"experiment={self.statistics}", f"sparsifier={method}",
                                 "sparsifier.threshold_start=calibrated", f"workers={self.base_workers},4,8,16,32"),
                                "from a calibrated start"))
        return tuple(sweeps)


QUICKSTART = StudySpec(
    name="quickstart", title="the quickstart workload (CNN, Fashion-MNIST, 71,802 parameters): the test suite's cut-down run",
    experiment="endtoend/quickstart", statistics="endtoend/quickstart_statistics", base_workers=2,
    # a split method with a plan (statistics), dense (and its overlapped twin), PowerSGD's bucketed exchange
    methods="dense,powersgd", settle=10, until=40, metric="eval/accuracy",
    quick_base=("dataset=digits", "max_steps=14", "logger=local"),
    # two seeds of DEFT: the extrapolation check's mean and standard error over them (check.py)
    quick_statistics=("dataset=digits", "max_steps=14", "workers=2,4", "seed=0,1", "logger=local", "sparsifier=deft"))
RESNET18 = StudySpec(
    name="resnet18", title="ResNet-18 (the papers' CIFAR-10 layout, 11.2 M parameters)",
    experiment="endtoend/resnet18", statistics="endtoend/resnet18_statistics", base_workers=2,
    methods="dense,dense_bf16,dense_fp16,powersgd,topk,deft", settle=2, until=5, metric="eval/accuracy",
    stands_for="resnet18_cifar10")
STUDIES = {study.name: study for study in (QUICKSTART, RESNET18)}
