"""Drawing a figure from the analysis, run by hand with nothing set, writes nothing under $HOME:
matplotlib's cache goes to outputs/.cache/ (experiments/runformat/caches.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from experiments.runformat.caches import MATPLOTLIB_CACHE

REPO = Path(__file__).resolve().parents[1]


def test_the_analysis_keeps_matplotlibs_cache_out_of_home(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {key: value for key, value in os.environ.items() if key not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    env["HOME"] = str(home)
    code = ("import analysis, os, matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt; "
            "plt.plot([1, 2]); plt.savefig(os.devnull, format='png'); print(matplotlib.get_cachedir())")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()) == MATPLOTLIB_CACHE and MATPLOTLIB_CACHE.is_relative_to(REPO / "outputs")
    assert not any(home.rglob("*")), sorted(home.rglob("*"))
