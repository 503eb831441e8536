"""The laptop studies `make reproduce` runs, as the `python run.py -m` command lines a user would
type (conf/experiment/laptop/), and their cut-down versions for the test suite.

Each sweep names the claims it serves (docs/claims.md); together they leave no claim without a
study. The selection-cost claims have a study of their own (experiments/reproduce/selection.py):
ResNet-18-sized gradients are too slow to train with 16 hosted ranks on 2 cores.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sweep:
    """One `python run.py -m ARGS` into `<out>/<folder>` (sweeps sharing a folder share a report)."""

    name: str
    folder: str
    args: tuple[str, ...]
    serves: str  # the claims it measures, for the progress line


STATISTICS = "experiment=laptop/statistics"
CONVERGENCE = "experiment=laptop/convergence"

SWEEPS = (
    Sweep("statistics", "statistics", (STATISTICS,),
          "build-up, traffic, density control, load balance, DEFT's allocation"),
    # The released start, 1/(2 sqrt(k)), selects far more than k until the threshold has climbed
    # (hundreds of steps): the same runs from a calibrated start show what the transient costs.
    Sweep("calibrated start", "statistics", (STATISTICS, "sparsifier=micro,exdyna", "sparsifier.threshold_start=calibrated"),
          "density control and traffic from MiCRO's and ExDyna's calibrated threshold start"),
    Sweep("drifting thresholds", "statistics", (STATISTICS, "sparsifier=threshold,sage", "workers=16"),
          "density control (the hard threshold and SAGE)"),
    Sweep("wide build-up", "statistics", (STATISTICS, "sparsifier=topk", "workers=32,64"),
          "build-up (Top-k up to 64 workers)"),
    Sweep("convergence", "convergence", (CONVERGENCE,), "convergence"),
    Sweep("DGC", "convergence", (CONVERGENCE, "sparsifier=dgc", "sparsifier.clip_norm=5.0"), "DGC"),
)

# The test suite's `make reproduce`: every stage on the bundled digits (no download), a few steps.
QUICK_ARGS = ("dataset=digits", "max_steps=16", "epochs=1", "logger.log_every=2", "warmup_steps=2")
QUICK_SWEEPS = (
    Sweep("statistics", "statistics", (STATISTICS, "sparsifier=topk,micro", "workers=2,4", *QUICK_ARGS),
          "build-up, traffic"),
    Sweep("convergence", "convergence", (CONVERGENCE, "sparsifier=dense,micro", *QUICK_ARGS), "convergence"),
)
