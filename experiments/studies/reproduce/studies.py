"""The laptop studies `make reproduce` runs, as the `python run.py -m` command lines a user would
type (conf/experiment/laptop/), and their cut-down versions for the test suite.

Each sweep names the claims it serves (docs/claims.md); together they leave no claim without a
study. The selection-cost claims have a study of their own (experiments/studies/reproduce/selection.py):
ResNet-18-sized gradients are too slow to train with 16 hosted ranks on 2 cores.
"""
from __future__ import annotations

from dataclasses import dataclass

from sparsifiers import registry


@dataclass(frozen=True)
class Sweep:
    """One `python run.py -m ARGS` into `<out>/<folder>` (sweeps sharing a folder share a report)."""

    name: str
    folder: str
    args: tuple[str, ...]
    serves: str  # the claims it measures, for the progress line


STATISTICS = "experiment=laptop/statistics"
# Their run directories say which start they had (the statistics folder holds both).
CALIBRATED_DIRS = "hydra.sweep.subdir=${hydra.job.num}_${hydra:runtime.choices.sparsifier}_calibrated_w${workers}"
CONVERGENCE = "experiment=laptop/convergence"
PAPER_DIRS = "hydra.sweep.subdir=${hydra.job.num}_oktopk_paper_w${workers}"

SWEEPS = (
    Sweep("statistics", "statistics", (STATISTICS,),
          "build-up, traffic, density control, load balance, DEFT's allocation, Ok-Topk's traffic bound"),
    # The released start, 1/(2 sqrt(k)), selects far more than k until the threshold has climbed
    # (hundreds of steps): the same runs from a calibrated start show what the transient costs.
    # One sweep per method: Hydra composes a sweep's base config without its comma lists, and the
    # default sparsifier (Top-k) has no threshold_start.
    *(Sweep(f"calibrated start, {method}", "statistics",
            (STATISTICS, f"sparsifier={method}", "sparsifier.threshold_start=calibrated", CALIBRATED_DIRS),
            f"density control and traffic from {registry.method(method).title}'s calibrated threshold start")
      for method in registry.names(calibrated_start=True)),
    Sweep("drifting thresholds", "statistics", (STATISTICS, "sparsifier=threshold,sage", "workers=16"),
          "density control (the hard threshold and SAGE)"),
    Sweep("wide build-up", "statistics", (STATISTICS, "sparsifier=topk,oktopk", "workers=32,64"),
          "build-up (Top-k up to 64 workers), Ok-Topk's traffic bound up to 64 workers"),
    # The bound 6k (W-1)/W assumes the paper's algorithm (exactly k selected and kept, the data
    # balancing): its variant is judged, the released runs above are reported beside it.
    Sweep("Ok-Topk, paper variant", "statistics",
          (STATISTICS, "sparsifier=oktopk", "sparsifier.variant=paper", "workers=2,4,16,64", PAPER_DIRS),
          "Ok-Topk's traffic bound, on the paper's algorithm"),
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
