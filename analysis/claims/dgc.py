"""DGC: with its warm-up and local gradient clipping, training at high compression keeps the
task metric of the dense baseline.

The runs judged are DGC's full recipe: `sparsifier.warmup=true` and a `sparsifier.clip_norm`
(the repository's default has none: the paper gives no value), at a density of at most 1% (the
paper's "high compression" is 270x to 600x; 100x is the least that still counts). The ablation
runs without warm-up or clipping are what the paper compares against; they are not judged here.
"""
from __future__ import annotations

import math

import pandas as pd

from analysis.claims.claim import Claim, Statistic
from analysis.claims.convergence import DIVERGED_TEXT, TOLERANCE_TEXT, gaps_to_dense, reaches
from analysis.claims.papers import DGC, experiment
from analysis.claims.study import Study

HIGH_COMPRESSION = 0.01  # density at most this (compression at least 100x)
WARMUP, CLIP = "cfg.sparsifier.warmup", "cfg.sparsifier.clip_norm"


def _true(value) -> bool:
    return value is True or str(value).lower() == "true"


def _clips(value) -> bool:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return False
    return math.isfinite(number) and number > 0


def full_recipe(runs: pd.DataFrame) -> pd.DataFrame:
    """DGC runs with warm-up on, clipping on, at high compression."""
    if runs.empty or WARMUP not in runs.columns or CLIP not in runs.columns:
        return runs.iloc[0:0]
    chosen = runs[WARMUP].map(_true) & runs[CLIP].map(_clips) & (pd.to_numeric(runs["density"], errors="coerce") <= HIGH_COMPRESSION)
    return runs[chosen]


def dgc_gaps(study: Study) -> Statistic:
    """DGC's full recipe against dense; a full-recipe run that diverged fails (an ablation run's
    divergence says nothing of the recipe: it is left out and named)."""
    runs, diverged = study.runs_of("dgc"), full_recipe(study.diverged_of("dgc"))
    if runs.empty and diverged.empty:
        return Statistic(gaps=("no finished DGC runs",))
    chosen = full_recipe(runs)
    if chosen.empty and diverged.empty:
        return Statistic(gaps=(f"no DGC run with warm-up and clipping (sparsifier.warmup=true, sparsifier.clip_norm set) "
                               f"at density <= {HIGH_COMPRESSION:g}",))
    return gaps_to_dense(study, chosen, "DGC", diverged)


CLAIMS = [Claim(
    id="dgc.dense",
    wording="With warm-up and local gradient clipping, DGC at high compression reaches the dense baseline's final task metric.",
    source=f"{DGC}, abstract: compression of 270x to 600x 'without losing accuracy', using momentum correction, "
           "local gradient clipping, momentum factor masking and warm-up training",
    needs=f"DGC runs with sparsifier.warmup=true and sparsifier.clip_norm set at density <= {HIGH_COMPRESSION:g}, and dense "
          f"runs at the same W, model, data and settings ({experiment('dgc_ablation')} plus its dense baseline)",
    statistic="final task metric (last evaluation, mean over seeds) of those DGC runs and of dense, per W and density",
    criterion=TOLERANCE_TEXT + ", at every W, context and density measured; " + DIVERGED_TEXT,
    measure=dgc_gaps,
    holds=reaches,
    studies=("dgc_ablation", "convergence"),  # the ablation, or DGC beside dense in a convergence sweep
)]
