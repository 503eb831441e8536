"""The baseline study: every registered method through the same battery, so that a scorecard places
its method among all of them (docs/compare.md, "The baseline study").

Its folder is keyed on where it runs: `outputs/compare/<commit>_<cpu>_<gpu>/`. A call at the same
commit on the same CPU and GPU reads the runs already there (each part of the battery is cached
by configuration, experiments/studies/compare/battery.py); a call at another commit or on another
machine gets a new folder, and runs them. A stopped study resumes: run_sweep keeps the finished
jobs of a sweep (make reproduce's resume), a selection replay that did not finish runs again.

Before it runs, the study says what it expects to take: each part the folder's ledger does not hold
(schedule.py), priced by ESTIMATE_S, the per-part wall times measured on this project's 2-core
machine; a stopped study is priced for what it still lacks.
"""
from __future__ import annotations

import re
from pathlib import Path

from experiments.engine.launcher.environment import _git, cpu_model
from experiments.studies.compare.battery import Plan, Scale
from experiments.studies.compare.schedule import Ledger, pending_sweeps
from experiments.studies.reproduce.studies import Sweep
from sparsifiers import registry

# Seconds per part of the battery and method, measured on the shared 2-core machine (docs/compare.md,
# "What it costs"), each untimed part's while another ran beside it (schedule.py): statistics at
# W = 2-16, three convergence seeds, the ResNet-18 statistics runs at W = 2-16 (battery.PER_STEP),
# and once the dense baselines' ResNet-18 runs at W = 2; each selection replay alone (a steered
# method settles its threshold for 400 steps first).
# Means over the 19 methods of the baseline study at 3d4ed96 (its ledger, one session of 45 min
# 22 s), so that the estimate adds up to the whole: DGC's replay (182 s) and SAGE's (288 s) are in
# them, and the one pool the replays share is in the first's (shared_gradient_pool).
ESTIMATE_S = {"statistics": 49, "convergence": 62, "per-step": 86, "per-step baselines": 38,
              "selection": 48, "selection, steered": 204}


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


def estimate_s(plans: list[Plan], baselines: list[tuple[str, Sweep]], ledger: Ledger, jobs: int) -> float:
    """The expected wall time of what the plans still need: ESTIMATE_S of each untimed sweep the
    ledger lacks, `jobs` of them at a time, and of each selection replay not done, one at a time."""
    untimed = sum(ESTIMATE_S[part] for part, _, _ in pending_sweeps(plans, baselines, ledger))
    timed = sum(ESTIMATE_S[plan.replay.part] for plan in plans if plan.replay is not None and not plan.replay.done())
    return untimed / jobs + timed


def battery_of(methods: list[str], scale: Scale) -> list[str]:
    """The named methods, then the field each scorecard places them among (Scale.field: every
    registered method unless the scale says otherwise)."""
    field = scale.field if scale.field is not None else registry.names()
    return [*methods, *(name for name in field if name not in methods)]
