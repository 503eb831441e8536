#!/usr/bin/env python
"""sparsebench's only entry point: compose the config once, validate it, launch the ranks.

    python run.py                                   # the default run (docs/quickstart.md)
    python run.py sparsifier=topk workers=8         # any override
    python run.py -m sparsifier=dense,topk workers=2,4   # a sweep: one run directory per job
    python run.py --cfg job                         # print the composed config
    python run.py resume=outputs/runs/<run>         # continue a stopped run from its last checkpoint
    python run.py --help                            # the groups, their options and the common keys

Bad input ends here with one line naming the key and the fix, exit code 2, before any process
starts. Ranks read the resolved config this process writes; they never run @hydra.main.
"""
from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from experiments.engine.launcher.compose import check_top_level_keys, preflight
from experiments.runformat.caches import DATASET_CACHE_VARIABLE, REPO_CACHE, keep_caches_out_of_home
from experiments.runformat.errors import ConfigError
from experiments.engine.launcher.help import PRIMARY_CONFIG, print_help, wants_help
from experiments.engine.launcher.launch import launch
from experiments.engine.rank.lifetime import Stopped
from experiments.engine.launcher.resume import resume, resume_argument
from experiments.engine.launcher.schema import register

register()
FAILED_JOBS: list[str] = []
# Decoded datasets are kept for the next process (datasets/cache.py): validation here and every
# rank, which inherits the variable, load them instead of decoding. Inside the repository's
# outputs/ (hidden: the analysis never searches it), never under $HOME; empty turns it off.
os.environ.setdefault(DATASET_CACHE_VARIABLE, str(REPO_CACHE))
keep_caches_out_of_home()  # the sweep's report draws with matplotlib in this process


def fail_config(error: ConfigError) -> None:
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)


@hydra.main(config_path="conf", config_name=PRIMARY_CONFIG, version_base="1.3")
def run(cfg: DictConfig) -> dict:
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    job = {
        "name": run_dir.name if not multirun else f"{Path(hydra_cfg.sweep.dir).name}/{run_dir.name}",
        "group": Path(hydra_cfg.sweep.dir).name if multirun else run_dir.name,
        "num": hydra_cfg.job.num if multirun else None,
        "overrides": list(hydra_cfg.overrides.task),
        "choices": {key: value for key, value in hydra_cfg.runtime.choices.items() if not key.startswith("hydra")},
    }
    from experiments.engine.launcher.validate import validate  # loads torch: after preflight, like launch's

    try:
        check_top_level_keys(cfg)
        validate(cfg)
        summary = launch(cfg, run_dir, job)
    except ConfigError as error:
        fail_config(error)
    except Stopped as stop:
        # The job's processes are gone and the run is marked failed; a sweep stops here too.
        sys.exit(128 + int(stop.signal))
    if summary["status"] != "done":
        FAILED_JOBS.append(str(run_dir))
    return summary


def resume_and_exit(directory: str) -> None:
    """`python run.py resume=DIR`: no composition, the run's own config.yaml (experiments/engine/launcher/resume.py)."""
    try:
        summary = resume(directory)
    except ConfigError as error:
        fail_config(error)
    except Stopped as stop:
        sys.exit(128 + int(stop.signal))
    exit_without_collecting()
    sys.exit(0 if summary["status"] == "done" else 1)


def exit_without_collecting() -> None:
    """Called once everything is written and printed. The interpreter's last garbage collections
    at exit walk every object torch, pandas and matplotlib created: 1.1-1.4 s at the end of a
    command on an idle machine, about 4 s after a sweep's report. Frozen, those objects are left
    to the operating system; the atexit handlers (Hydra's log files, W&B's teardown) still run."""
    gc.freeze()


if __name__ == "__main__":
    try:
        if wants_help(sys.argv[1:]):  # the project's help (experiments/engine/launcher/help.py); Hydra's is --hydra-help
            print_help(sys.argv[1:])
            sys.exit(0)
        directory = resume_argument(sys.argv[1:])
        if directory is not None:
            resume_and_exit(directory)
        preflight(sys.argv[1:])
    except ConfigError as error:
        fail_config(error)
    run()
    exit_without_collecting()
    if FAILED_JOBS:
        print(f"{len(FAILED_JOBS)} run(s) failed: {', '.join(FAILED_JOBS)}", file=sys.stderr)
        sys.exit(1)
