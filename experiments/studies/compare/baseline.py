"""The baseline study: every registered method through the same battery, so that a scorecard places
its method among all of them (docs/compare.md, "The baseline study").

Its folder is keyed on where it runs: `outputs/compare/<commit>_<cpu>_<gpu>/`. A call at the same
commit on the same CPU and GPU reads the runs already there (each part of the battery is cached
by configuration, experiments/studies/compare/battery.py); a call at another commit or on another
machine gets a new folder, and runs them. A stopped study resumes: run_sweep keeps the finished
jobs of a sweep (make reproduce's resume), a selection replay that did not finish runs again.

Before it runs, the study says what it expects to take: the methods without a record in the
folder, each priced by ESTIMATE_S, the per-part wall times measured on this project's 2-core
machine.
"""
from __future__ import annotations

import re
from pathlib import Path

from experiments.engine.launcher.environment import _git, cpu_model
from experiments.studies.compare.battery import Scale
from experiments.studies.compare.pays import PerStepScale
from sparsifiers import registry

# Seconds per part of the battery and method, measured on the shared 2-core machine (docs/compare.md,
# "What it costs"): statistics at W = 2-16, the selection replay (a thresholded method settles its
# threshold for 400 steps first), three convergence seeds, the ResNet-18 statistics runs at W = 2-32
# (Top-k's: 149 s); and once, the dense baselines' ResNet-18 runs at W = 2 (43 s).
ESTIMATE_S = {"statistics": 68, "selection": 72, "selection, thresholded": 188, "convergence": 76, "per-step": 150,
              "per-step baselines": 43}


def slug(text: str | None) -> str:
    """A name's letters and digits, dashes between (a folder name on every file system)."""
    return re.sub(r"[^A-Za-z0-9]+", "-", text or "unknown").strip("-").lower()[:40]


def study_key(gpus: list[str]) -> str:
    """Where a study's numbers come from: the commit, the CPU model and the GPUs (or `cpu`)."""
    commit = (_git("rev-parse", "HEAD") or "no-commit")[:12]
    return f"{commit}_{slug(cpu_model())}_{slug('+'.join(gpus)) if gpus else 'cpu'}"


def gpu_names() -> list[str]:
    import torch

    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def keyed_folder(root: Path) -> Path:
    """The study folder for this commit, CPU and GPU under `root` (module docstring)."""
    return root / study_key(gpu_names())


def estimate_s(methods: list[str], out: Path) -> float:
    """The expected wall time of the methods' battery: ESTIMATE_S for each part of each method that
    has no record in `out` yet (a method with one ran whole: its parts are reused), and the dense
    baselines' per-step runs once when the folder has none."""
    total = 0.0 if (out / PerStepScale().study.name / "base").is_dir() else ESTIMATE_S["per-step baselines"]
    for method in methods:
        if (out / "records" / f"{method}.json").is_file():
            continue
        entry = registry.method(method)
        total += ESTIMATE_S["convergence"]
        if entry.selects:
            total += ESTIMATE_S["statistics"] + ESTIMATE_S["per-step"]
            total += ESTIMATE_S["selection, thresholded" if entry.thresholded else "selection"]
    return total


def battery_of(methods: list[str], scale: Scale) -> list[str]:
    """The named methods, then the field each scorecard places them among (Scale.field: every
    registered method unless the scale says otherwise)."""
    field = scale.field if scale.field is not None else registry.names()
    return [*methods, *(name for name in field if name not in methods)]
