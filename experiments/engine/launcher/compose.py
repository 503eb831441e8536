"""Composition before launch: every job of a command line (every point of a `-m` sweep) is
composed with Hydra's compose API and validated, so bad input fails in one line, exit code 2,
before any process starts. Hydra's own messages are translated to name the key and the fix."""
from __future__ import annotations

import dataclasses
import difflib
import itertools
import re
import sys
import threading
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra._internal.utils import get_args_parser
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig, OmegaConf

from experiments.engine.launcher.environment_checks import check_creatable, check_not_a_run, job_run_dir
from experiments.runformat.errors import ConfigError
from experiments.engine.launcher.launch import joins_another_node
from experiments.engine.launcher.schema import RunConfig, register

CONF_DIR = Path(__file__).resolve().parents[3] / "conf"  # experiments/engine/launcher/ is three below the repository
MULTIRUN_FLAGS = {"-m", "--multirun"}
# Hydra's compose API initialises one process-wide GlobalHydra: two threads composing at once (make
# compare's sweeps, two at a time, each checking its folder) collide ("GlobalHydra is already
# initialized"), so one composes at a time.
_COMPOSING = threading.Lock()


def job_overrides(args: list[str]) -> list[list[str]]:
    """The override list of every job the command line describes (the basic sweeper's product)."""
    try:
        overrides = OverridesParser.create().parse_overrides([a for a in args if a not in MULTIRUN_FLAGS])
    except OverrideParseException as error:
        raise ConfigError(f"cannot parse the overrides: {str(error).splitlines()[0]}") from None
    multirun = any(a in MULTIRUN_FLAGS for a in args)
    choices = []
    for override in overrides:
        if not multirun and override.is_sweep_override():
            raise ConfigError(f"{override.input_line}: a comma list is a sweep, one run per value: did you mean -m "
                              f"(a sweep)? python run.py -m {override.input_line}")
        if multirun and override.is_sweep_override():
            key = override.get_key_element()
            choices.append([f"{key}={value}" for value in override.sweep_string_iterator()])
        else:
            choices.append([override.input_line])
    return [list(combination) for combination in itertools.product(*choices)]


def compose_job(overrides: list[str]) -> DictConfig:
    """Composes one job's config (Hydra's settings included), translating errors."""
    try:
        with _COMPOSING:
            register()
            with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
                return compose("config", overrides=overrides, return_hydra_config=True)
    except (ConfigCompositionException, MissingConfigException) as error:
        raise ConfigError(translate(error)) from None


def _group_options(group: str) -> list[str]:
    """The options of a config group, nested ones as `paper/selection_time`."""
    folder = CONF_DIR / group
    return sorted(str(path.relative_to(folder).with_suffix("")) for path in folder.rglob("*.yaml"))


def _suggest(key: str) -> str:
    *parents, last = key.split(".")
    known = [field.name for field in dataclasses.fields(RunConfig)] if not parents else []
    close = difflib.get_close_matches(last, known, n=1)
    return f" Did you mean '{'.'.join(parents + [close[0]])}'?" if close else ""


def translate(error: Exception) -> str:
    """Hydra's composition errors -> one line naming the key and the fix."""
    message = str(error)
    missing = re.search(r"Could not find '([^/']+)/([^']+)'", message)
    if missing:
        group, option = missing.groups()
        return f"{group}={option}: no such option; choose one of: {', '.join(_group_options(group))}"
    unknown = re.search(r"Could not override '([^']+)'", message)
    if unknown:
        key = unknown.group(1)
        return f"unknown key '{key}': not in the config.{_suggest(key)} (python run.py --cfg job lists every key)"
    merging = re.search(r"Error merging override (\S+)", message)
    if merging:
        cause = str(error.__cause__ or "").splitlines()
        detail = cause[0] if cause else "bad value"
        wanted = re.search(r"could not be converted to (Integer|Float)|is not a valid bool", detail)
        if wanted:  # the fix: what the key takes
            kind = {"Integer": "an integer", "Float": "a number"}.get(wanted.group(1) or "", "true or false")
            detail += f": {merging.group(1).split('=')[0]} takes {kind}"
        return f"{merging.group(1)}: {detail}"
    return message.splitlines()[0]


def check_top_level_keys(cfg: DictConfig) -> None:
    """`+key=value` can add keys the schema does not know: reject them too."""
    known = {field.name for field in dataclasses.fields(RunConfig)}
    for key in cfg:
        if key != "hydra" and key not in known:
            raise ConfigError(f"unknown key '{key}': not in the config.{_suggest(key)} (python run.py --cfg job lists every key)")


def _config_sweep(overrides: list[str], cfg: DictConfig | None = None) -> list[str]:
    """Sweep values an experiment file sets in hydra.sweeper.params, as overrides, for keys
    the command line does not set itself (the basic sweeper's precedence). `cfg`: the job
    already composed from `overrides`, if there is one."""
    cfg = cfg if cfg is not None else compose_job(job_overrides(overrides + ["-m"])[0])
    params = cfg.hydra.sweeper.get("params") or {}
    given = {arg.split("=")[0].lstrip("+~") for arg in overrides if "=" in arg}
    return [f"{key}={value}" for key, value in params.items() if key not in given]


def _note_unswept(overrides: list[str], cfg: DictConfig) -> None:
    """An experiment file that sweeps, run without -m, runs one job: say so and how to sweep."""
    unswept = _config_sweep(overrides, cfg)
    if unswept:
        experiment = next((arg for arg in overrides if arg.startswith("experiment=")), "that experiment")
        print(f"note: {experiment} sweeps {' '.join(unswept)}; without -m this runs one job: "
              f"python run.py -m {' '.join(overrides)} runs them all", file=sys.stderr, flush=True)


def preflight(args: list[str]) -> int:
    """Composes and validates every job of the command line, and checks where each will be
    written, before Hydra creates anything; returns how many jobs there are (0 when Hydra will
    only print help). `--cfg` validates what it prints. Raises ConfigError."""
    if "--version" in args:
        return 0  # an argparse action that prints and exits: leave it to Hydra
    try:
        parsed = get_args_parser().parse_args(args)
    except SystemExit:
        return 0  # Hydra's own parser reports a bad flag when run() parses the same line
    if parsed.help or parsed.hydra_help or parsed.shell_completion or parsed.info:
        return 0
    if parsed.config_path or parsed.config_name or parsed.config_dir or parsed.experimental_rerun:
        return 0  # another config source: the in-job validation covers these runs
    overrides, multirun = list(parsed.overrides), bool(parsed.multirun)
    if multirun:
        overrides += _config_sweep(overrides)
    jobs = job_overrides(overrides + (["-m"] if multirun else []))
    configs = [compose_job(job) for job in jobs]
    for cfg in configs:
        check_top_level_keys(cfg)
    # Validation builds the model, the data and the sparsifier, so it loads torch (2-4 s): only
    # once every job has composed, so that a typo is answered at once.
    from experiments.engine.launcher.validate import validate

    for num, cfg in enumerate(configs):
        validate(cfg)
        if parsed.cfg is None:  # --cfg prints and exits: Hydra creates no directory then
            check_run_dir(cfg, multirun, num)
            if not multirun:
                _note_unswept(overrides, cfg)
    if len(configs) > 1:
        check_layout_devices(configs)
    return len(jobs)


def check_layout_devices(configs: list[DictConfig], gpus: int | None = None) -> None:
    """A sweep comparing layouts under reduction=rank_order must run them on one device: with
    fewer GPUs than processes, device=auto sends a hosted job to the GPU and a multi-process job
    to the CPU, whose logged numbers then differ at step 0 without any bug (runtime.auto_device)."""
    from experiments.runformat.runtime import _gpu_count, mixed_layout_devices

    problem = mixed_layout_devices(configs, _gpu_count(gpus))
    if problem:
        raise ConfigError(problem)


def check_run_dir(cfg: DictConfig, multirun: bool, num: int) -> None:
    """The directory Hydra will create for this job must be creatable and not hold a run."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    run_dir = job_run_dir(cfg, multirun, num)
    # The overrides as typed: an element such as hydra.sweep.subdir=${hydra.job.num}_x is text
    # here, not an interpolation to resolve (there is no job number before Hydra runs the job).
    typed = OmegaConf.to_container(cfg.hydra.overrides.hydra, resolve=False)
    check_creatable(run_dir, key if f"{key}=" in " ".join(typed) else "output_root")
    if not joins_another_node(cfg, run_dir):  # several nodes share one directory
        check_not_a_run(run_dir, key)
