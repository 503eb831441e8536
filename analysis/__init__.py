"""From run directories (or a W&B project) to tidy tables, figures and a report.

    from analysis import load_runs
    tables = load_runs(["outputs/sweeps"])      # runs, steps, epochs (analysis.tables)

`python -m analysis.report DIR...` writes report.md and the figures.
"""
from experiments.runformat.caches import keep_caches_out_of_home

keep_caches_out_of_home()  # before matplotlib is imported by any figure: its cache stays out of $HOME

from analysis.load import default_run_paths, load_runs  # noqa: E402
from analysis.tables import RunTables  # noqa: E402

__all__ = ["RunTables", "default_run_paths", "load_runs"]
