"""From run directories (or a W&B project) to tidy tables, figures and a report.

    from analysis import load_runs
    tables = load_runs(["outputs/sweeps"])      # runs, steps, epochs (analysis.tables)

`python -m analysis.report DIR...` writes report.md and the figures.
"""
from analysis.load import default_run_paths, load_runs
from analysis.tables import RunTables

__all__ = ["RunTables", "default_run_paths", "load_runs"]
