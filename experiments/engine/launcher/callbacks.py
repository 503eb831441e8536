"""Hydra callbacks: every `-m` sweep ends with its report (analysis.report): the comparison table
printed, and report.md, the figures (method_comparison.png first) and the CSVs saved in
<sweep dir>/report/."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class ReportSweep(Callback):
    """Writes the sweep's report once every job has finished (failed jobs are listed in it)."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        import matplotlib

        matplotlib.use("Agg")  # files only, never a window
        from analysis.report import write_report

        sweep_dir = Path(config.hydra.sweep.dir)
        out = sweep_dir / "report"
        try:
            text = write_report([sweep_dir], out)
        except Exception as error:  # a report must never turn finished runs into a failed command
            print(f"warning: no sweep report ({type(error).__name__}: {error})", file=sys.stderr)
            return
        print(f"\ncomparison of {sweep_dir.name} (per method and worker count):\n{text}")
        print(f"  report: {out / 'report.md'}\n  figure: {out / 'method_comparison.png'}", flush=True)
