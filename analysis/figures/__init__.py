"""One function per figure type. Each takes the tidy tables (analysis.tables.RunTables) and
returns a matplotlib Figure, or None when the runs hold no data for it (the report then says
"no data"). Figures are built without pyplot, so they render under Agg in scripts and inline
in notebooks alike. Every figure's title names the model and dataset its runs share and warns
when any of them trained on stand-in data (style.finish, analysis.figures.provenance).
"""
from __future__ import annotations

from typing import Callable

from matplotlib.figure import Figure

from analysis.figures.ablation import dgc_ablation
from analysis.figures.comparison import method_comparison
from analysis.figures.convergence import accuracy_curves, residual_norm, task_metric_curves
from analysis.figures.deft import deft_units
from analysis.figures.scaling import buildup_density_vs_workers, compression_error, selection_time_vs_workers
from analysis.figures.threshold import density_vs_step, load_imbalance_vs_step, partition_boundaries
from analysis.figures.timing import step_time_breakdown
from analysis.tables import RunTables

# name (the PNG's file name) -> (function, caption); the report's order.
FIGURES: dict[str, tuple[Callable[[RunTables], Figure | None], str]] = {
    "method_comparison": (method_comparison, "Method comparison"),
    "selection_time_vs_workers": (selection_time_vs_workers, "Selection time vs workers"),
    "buildup_density_vs_workers": (buildup_density_vs_workers, "Build-up and actual density vs workers"),
    "compression_error": (compression_error, "Compression ratio error per method"),
    "step_time_breakdown": (step_time_breakdown, "Step time breakdown"),
    "task_metric_curves": (task_metric_curves, "Task metric (accuracy, perplexity, HR@10) vs epoch and vs time"),
    "residual_norm": (residual_norm, "Error-feedback residual"),
    "density_vs_step": (density_vs_step, "Actual density vs step (threshold methods)"),
    "load_imbalance_vs_step": (load_imbalance_vs_step, "Load imbalance vs step (MiCRO vs ExDyna)"),
    "partition_boundaries": (partition_boundaries, "ExDyna partition boundaries"),
    "deft_units": (deft_units, "DEFT unit norms, k allocation and bin loads"),
    "dgc_ablation": (dgc_ablation, "DGC ablation: train loss and task metric per knob variant"),
}

__all__ = [
    "FIGURES", "accuracy_curves", "method_comparison", "buildup_density_vs_workers", "compression_error", "deft_units", "density_vs_step",
    "dgc_ablation", "load_imbalance_vs_step", "partition_boundaries", "residual_norm", "selection_time_vs_workers",
    "step_time_breakdown", "task_metric_curves",
]
