"""The studies `make endtoend` runs and models: each a set of `python run.py -m` command lines
(conf/experiment/endtoend/) and the window of steps its statistics are read from.

A study's runs are short statistics runs (no seeds, no accuracy: the per-step factor does not
depend on them, breakeven.py):

- the dense baselines at the smallest hosted W: their compute time and ledgers (what they send
  does not depend on the data, nor their ledger's shape on W);
- each sparsifier at every hosted W, only the steps of the window: the hosted points the
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
from sparsifiers import registry
from sparsifiers.registry import chosen, names

# The methods with a threshold_start: one sweep each (the default sparsifier has no threshold_start).
CALIBRATED = names(calibrated_start=True)


@dataclass(frozen=True)
class StudySpec:
    name: str
    title: str
    experiment: str  # the study's model, data and per-worker batch
    statistics: str  # the experiment of the statistics runs
    base_workers: int  # the smallest hosted W: every method runs there
    methods: str  # the dense baselines, comma-separated: at base_workers only
    sparsifiers: tuple[str, ...]  # every sparsifier but the calibrated ones (CALIBRATED: each its own sweep too)
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
        """Each sparsifier's statistics at every hosted W, one sweep each (MiCRO's and ExDyna's from
        a calibrated start), then the dense baselines at the smallest W: sweeps of about one size,
        longest first, so that taken two at a time they end together. The cut-down run: one
        statistics sweep and the baselines, on its own overrides."""
        base = self.base_sweep(quick)
        if quick:
            return (Sweep(f"{self.name}: statistics runs", f"{self.name}/statistics",
                          (f"experiment={self.statistics}", *self.quick_statistics), "|U|, k_max and selection time"), base)
        return (*(self.statistics_sweep(method) for method in (*self.sparsifiers, *CALIBRATED)), base)

    def base_sweep(self, quick: bool = False) -> Sweep:
        """The dense baselines at the smallest hosted W (the cut-down run's on its own overrides)."""
        return Sweep(f"{self.name}: the dense baselines at W = {self.base_workers}", f"{self.name}/base",
                     (f"experiment={self.statistics}", f"workers={self.base_workers}", f"sparsifier={self.methods}",
                      "seed=0", *(self.quick_base if quick else ())), "compute, and the dense baselines' ledgers")

    def statistics_sweep(self, method: str, hosted: tuple[str, ...] = ()) -> Sweep:
        """One sparsifier's statistics at every hosted W (`hosted`: other overrides in place of the
        worker grid, e.g. make compare's cut-down battery), from a calibrated start where it has
        a threshold_start (module docstring)."""
        calibrated = registry.method(method).calibrated_start
        return Sweep(f"{self.name}: statistics, {method}", f"{self.name}/statistics_{method}",
                     (f"experiment={self.statistics}", f"sparsifier={method}",
                      *(hosted or (f"workers={self.base_workers},4,8,16,32",)),
                      *(("sparsifier.threshold_start=calibrated",) if calibrated else ())),
                     "|U|, k_max and selection time" + (", from a calibrated start" if calibrated else ""))


QUICKSTART = StudySpec(
    name="quickstart", title="the quickstart workload (CNN, Fashion-MNIST, 71,802 parameters): the test suite's cut-down run",
    experiment="endtoend/quickstart", statistics="endtoend/quickstart_statistics", base_workers=2,
    # a split method with a plan (statistics), dense (and its overlapped twin), PowerSGD's bucketed exchange
    methods=",".join(chosen("dense", "powersgd")), sparsifiers=chosen("deft"),
    settle=10, until=40, metric="eval/accuracy",
    quick_base=("dataset=digits", "max_steps=14", "logger=local"),
    # two seeds of DEFT: the extrapolation check's mean and standard error over them (check.py)
    quick_statistics=("dataset=digits", "max_steps=14", "workers=2,4", "seed=0,1", "logger=local", "sparsifier=deft"))
RESNET18 = StudySpec(
    name="resnet18", title="ResNet-18 (the papers' CIFAR-10 layout, 11.2 M parameters)",
    experiment="endtoend/resnet18", statistics="endtoend/resnet18_statistics", base_workers=2,
    methods=",".join(chosen("dense", "dense_bf16", "dense_fp16", "powersgd")), sparsifiers=chosen("topk", "deft"),
    settle=2, until=5, metric="eval/accuracy",
    stands_for="resnet18_cifar10")
STUDIES = {study.name: study for study in (QUICKSTART, RESNET18)}
