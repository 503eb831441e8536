"""Composition before launch: every job of a command line (every point of a `-m` sweep) is
composed with Hydra's compose API and validated, so bad input fails in one line, exit code 2,
before any process starts. Hydra's own messages are translated to name the key and the fix."""
from __future__ import annotations

import dataclasses
import difflib
import itertools
import re
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig

from experiments.schema import RunConfig, register
from experiments.validate import validate
from sparsifiers.base import ConfigError

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
# Flags after which Hydra prints something instead of running: nothing to validate.
INFO_FLAGS = {"--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--shell-completion", "-sc", "--version"}
# Flags that change where the config comes from: the in-job validation covers these runs.
SOURCE_FLAGS = {"--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd", "--experimental-rerun"}
MULTIRUN_FLAGS = {"-m", "--multirun"}


def job_overrides(args: list[str]) -> list[list[str]]:
    """The override list of every job the command line describes (the basic sweeper's product)."""
    try:
        overrides = OverridesParser.create().parse_overrides([a for a in args if a not in MULTIRUN_FLAGS])
    except OverrideParseException as error:
        raise ConfigError(f"cannot parse the overrides: {str(error).splitlines()[0]}") from None
    multirun = any(a in MULTIRUN_FLAGS for a in args)
    choices = []
    for override in overrides:
        if multirun and override.is_sweep_override():
            key = override.get_key_element()
            choices.append([f"{key}={value}" for value in override.sweep_string_iterator()])
        else:
            choices.append([override.input_line])
    return [list(combination) for combination in itertools.product(*choices)]


def compose_job(overrides: list[str]) -> DictConfig:
    """Composes one job's config (Hydra's settings included), translating errors."""
    register()
    try:
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
        return f"{merging.group(1)}: {detail}"
    return message.splitlines()[0]


def check_top_level_keys(cfg: DictConfig) -> None:
    """`+key=value` can add keys the schema does not know: reject them too."""
    known = {field.name for field in dataclasses.fields(RunConfig)}
    for key in cfg:
        if key != "hydra" and key not in known:
            raise ConfigError(f"unknown key '{key}': not in the config.{_suggest(key)} (python run.py --cfg job lists every key)")


def _config_sweep(overrides: list[str]) -> list[str]:
    """Sweep values an experiment file sets in hydra.sweeper.params, as overrides, for keys
    the command line does not set itself (the basic sweeper's precedence)."""
    cfg = compose_job(job_overrides(overrides + ["-m"])[0])
    params = cfg.hydra.sweeper.get("params") or {}
    given = {arg.split("=")[0].lstrip("+~") for arg in overrides if "=" in arg}
    return [f"{key}={value}" for key, value in params.items() if key not in given]


def preflight(args: list[str]) -> int:
    """Composes and validates every job; returns how many there are. Raises ConfigError."""
    if any(arg.split("=")[0] in INFO_FLAGS | SOURCE_FLAGS for arg in args):
        return 0
    overrides = [arg for arg in args if not arg.startswith("-")]
    multirun = any(a in MULTIRUN_FLAGS for a in args)
    if multirun:
        overrides += _config_sweep(overrides)
    jobs = job_overrides(overrides + (["-m"] if multirun else []))
    for job in jobs:
        cfg = compose_job(job)
        check_top_level_keys(cfg)
        validate(cfg)
    return len(jobs)
