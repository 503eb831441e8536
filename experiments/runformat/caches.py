"""Where the tools' own caches go when nothing else says: inside the repository, never $HOME.

matplotlib writes a font cache on first use, in ~/.config/matplotlib unless MPLCONFIGDIR says
otherwise. `make` sets it (Makefile), the launcher sets it per run for the ranks (launch.py),
and the tests use temporary directories; this covers run.py's own sweep report and the analysis
run by hand (`python -m analysis.report ...`, a notebook). A value already set is kept.
"""
from __future__ import annotations

import os
from pathlib import Path

from experiments.runformat.run_dir import CACHE_DIR

REPO_ROOT = Path(__file__).resolve().parents[2]
# outputs/.cache/: hidden, so the analysis never searches it for runs; ignored by git.
REPO_CACHE = REPO_ROOT / "outputs" / CACHE_DIR
MATPLOTLIB_CACHE = REPO_CACHE / "matplotlib"
# The decoded-dataset cache's folder (datasets/cache.py), named here so that run.py sets it
# without importing torch (bad input is answered before torch loads).
DATASET_CACHE_VARIABLE = "SPARSEBENCH_CACHE_DIR"


def keep_caches_out_of_home() -> None:
    """Points matplotlib's cache into outputs/.cache/ unless MPLCONFIGDIR is set already."""
    os.environ.setdefault("MPLCONFIGDIR", str(MATPLOTLIB_CACHE))
