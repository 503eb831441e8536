"""`python run.py --help`: the project's own help, built from conf/ at run time.

Hydra's help prints the whole composed config and a bare list of group options; a newcomer needs
what each option is, the keys people change, and how to sweep or resume. Everything here is read
from the config files when the help is asked for (the first comment line of each option, the
comment beside each key, the values of the composed config), so the help cannot go stale when an
option or a knob is added. Printing it composes the config in memory only: no run directory, no
process, nothing written. Hydra's own help stays reachable as `--hydra-help`.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

HELP_FLAGS = ("-h", "--help")
MULTIRUN_FLAGS = ("-m", "--multirun")
# The groups in the order a run is usually described: what is compared, on what, how it runs.
GROUP_ORDER = ("sparsifier", "model", "dataset", "optimizer", "schedule", "workload", "experiment", "scale",
               "network", "logger", "launcher")
# Folders of conf/ that run.py does not compose (`python run.py <folder>=...` is an unknown key):
# conf/compute_profile/ holds the GPU profiles `make endtoend` reads (experiments/studies/endtoend/compute.py).
# The help lists groups a run takes, so these are left out.
NOT_RUN_GROUPS = ("compute_profile",)
# What a group is, where its name alone does not say it.
GROUP_NOTES = {
    "workload": "(a paper's model, data and training harness together)",
    "experiment": "(files holding only their deltas; each sweeps: run it with -m)",
    "scale": "(paper: as written | smoke: a few hosted steps on stand-in data)",
}
# Nested nodes whose keys are common enough to list (the sparsifier's: the knobs of the chosen option).
NESTED = ("sparsifier", "checkpoint", "logger", "launcher", "network")
METADATA = ("_target_", "_partial_", "name")
PRIMARY_CONFIG = "config"  # conf/<this>.yaml: run.py's @hydra.main(config_name=...), not a run file
KEY_LINE = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z_][\w]*):(?P<value>[^#]*?)\s*(?:#\s?(?P<comment>.*))?$")


def wants_help(args: list[str]) -> bool:
    """True when the command line asks for the project's help (`-h` or `--help`)."""
    return any(arg in HELP_FLAGS for arg in args)


SENTENCE_END = re.compile(r"(?<!\bal)\.\s+(?=[A-Z(])")


def describe_option(path: Path) -> str:
    """The first sentence of the comment block that opens an option's file, '' if none."""
    block = []
    for line in path.read_text().splitlines():
        text = line.strip()
        if not text.startswith("#"):
            break
        text = text.lstrip("#").strip()
        if text and not text.startswith("@package"):
            block.append(text)
    text = " ".join(block)
    end = SENTENCE_END.search(text)
    return text[: end.start() + 1] if end else text


def group_options(conf_dir: Path, group: str) -> list[tuple[str, str]]:
    """(option, description) for every file of a group, nested ones as `paper/selection_time`."""
    folder = conf_dir / group
    return [(str(path.relative_to(folder).with_suffix("")), describe_option(path)) for path in sorted(folder.rglob("*.yaml"))]


def default_choices(conf_dir: Path) -> dict[str, str | None]:
    """The option each group defaults to, from the defaults list of conf/config.yaml."""
    choices: dict[str, str | None] = {}
    for entry in yaml.safe_load((conf_dir / f"{PRIMARY_CONFIG}.yaml").read_text())["defaults"]:
        if isinstance(entry, dict):
            choices.update(entry)
    return choices


def key_comments(path: Path, prefix: str = "") -> dict[str, str]:
    """`dotted.key -> the comment beside it` for the keys of one YAML file (nesting by indent)."""
    comments, parents = {}, []  # parents: (indent, key) of the enclosing mappings
    for line in path.read_text().splitlines():
        match = KEY_LINE.match(line)
        if not match:
            continue
        indent = len(match["indent"])
        while parents and parents[-1][0] >= indent:
            parents.pop()
        key = ".".join([*(p[1] for p in parents), match["key"]])
        if match["comment"]:
            comments[prefix + key] = match["comment"].strip()
        if not match["value"].strip():
            parents.append((indent, match["key"]))
    return comments


def show(value: Any) -> str:
    """A value as one would type it on the command line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return value if value else '""'
    return str(value).replace(" ", "")


def common_keys(cfg: DictConfig, conf_dir: Path) -> list[tuple[str, str, str]]:
    """(key, value, comment) for the top-level scalars and the common nested nodes."""
    choices = OmegaConf.select(cfg, "hydra.runtime.choices") or {}
    comments = key_comments(conf_dir / f"{PRIMARY_CONFIG}.yaml")
    for group in NESTED:
        option = choices.get(group)
        if option and (conf_dir / group / f"{option}.yaml").is_file():
            comments.update(key_comments(conf_dir / group / f"{option}.yaml", prefix=f"{group}."))
    # Key by key: the hydra node holds interpolations (${hydra:...}) that resolve only inside a job.
    values = {key: OmegaConf.to_container(cfg[key], resolve=True) if OmegaConf.is_config(cfg[key]) else cfg[key]
              for key in cfg if key != "hydra"}
    rows = [(key, show(value), comments.get(key, "")) for key, value in values.items()
            if key not in NESTED and not isinstance(value, (dict, list))]
    for group in NESTED:
        node = values.get(group) or {}
        rows += [(f"{group}.{key}", show(value), comments.get(f"{group}.{key}", ""))
                 for key, value in node.items() if key not in METADATA]
    return rows


def _wrap(text: str, width: int, indent: int) -> list[str]:
    """`text` cut to lines of `width` after `indent` spaces (at spaces)."""
    room, lines, line = max(width - indent, 20), [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > room:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return lines + ([line] if line else [])


def _cut(text: str, room: int) -> str:
    """`text` on one line of at most `room` characters, cut at a space with '...'."""
    if len(text) <= room:
        return text
    return text[: max(room - 3, 1)].rsplit(" ", 1)[0].rstrip(",;:(") + "..."


def _table(rows: list[tuple[str, str]], width: int, indent: int = 2, one_line: bool = False) -> list[str]:
    """Two columns: a left cell and its description beside it, wrapped (or cut to one line)."""
    left = min(max((len(cell) for cell, _ in rows), default=0), 36) + 2
    out = []
    for cell, text in rows:
        if one_line:
            text = _cut(text, max(width - indent - max(left, len(cell) + 2), 20))
        wrapped = _wrap(text, width, indent + left) or [""]
        if len(cell) + 2 > left:  # too long for the column: description on the next line
            out.append(" " * indent + cell)
            out += [" " * (indent + left) + piece for piece in wrapped if piece]
            continue
        out.append(" " * indent + cell.ljust(left) + wrapped[0])
        out += [" " * (indent + left) + piece for piece in wrapped[1:]]
    return out


def help_text(cfg: DictConfig, conf_dir: Path, width: int | None = None) -> str:
    """The whole help: usage, groups and their options, common keys, sweeps, resume, more help."""
    width = width or min(shutil.get_terminal_size((100, 24)).columns, 120)
    choices = OmegaConf.select(cfg, "hydra.runtime.choices") or default_choices(conf_dir)
    lines = [
        "sparsebench: gradient sparsifiers compared in data-parallel training.",
        "",
        "usage: python run.py [group=option ...] [key=value ...]      one run",
        "       python run.py -m [key=a,b,c ...]                      a sweep: one run per combination",
        "       python run.py resume=<run dir>                        continue a stopped run",
        "       python run.py [overrides] --cfg job                   print the composed config and exit",
        "",
        "Config groups (group=option; * marks the option in effect):",
    ]
    groups = [g for g in GROUP_ORDER if (conf_dir / g).is_dir()]
    groups += sorted(p.name for p in conf_dir.iterdir() if p.is_dir() and p.name not in groups and p.name not in NOT_RUN_GROUPS)
    for group in groups:
        lines += ["", f"  {group}:" + (f" {GROUP_NOTES[group]}" if group in GROUP_NOTES else "")]
        chosen = choices.get(group)
        rows = [(("* " if option == chosen else "  ") + option, text) for option, text in group_options(conf_dir, group)]
        lines += _table(rows, width, indent=4, one_line=True)
    lines += ["", "Common keys (key=value; the values in effect, from the composed config):", ""]
    lines += _table([(f"{key}={value}", comment) for key, value, comment in common_keys(cfg, conf_dir)], width)
    lines += [
        "",
        f"  The sparsifier.* keys are the knobs of sparsifier={choices.get('sparsifier')}; another option's:",
        "  python run.py sparsifier=micro --help. Every key: python run.py --cfg job.",
        "",
        "Sweeps (-m): the product of comma-separated values, one run directory per job, one report:",
        "  python run.py -m sparsifier=topk,deft,micro workers=2,4",
        "  python run.py -m experiment=quickstart        (make run's comparison, docs/quickstart.md; experiments sweep with -m)",
        "  python run.py -m experiment=paper/selection_time scale=smoke",
        "",
        "Resume: python run.py resume=outputs/runs/<run>  continues from the run's newest checkpoint",
        "  with its own config.yaml (no other argument).",
        "",
        "Bad input stops before anything starts: one line naming the key and the fix, exit code 2.",
        "More: README.md and docs/ (docs/README.md lists every page);",
        "Hydra's own help: python run.py --hydra-help.",
    ]
    return "\n".join(lines) + "\n"


def overrides_for_help(args: list[str]) -> list[str]:
    """The overrides of a help command line, flags dropped; for a sweep, its first job's values."""
    overrides = [arg for arg in args if arg not in HELP_FLAGS and arg not in MULTIRUN_FLAGS and not arg.startswith("-")]
    return [re.sub(r"^([^=]+)=([^,\[\]]*),.*$", r"\1=\2", arg) for arg in overrides]


def print_help(args: list[str]) -> None:
    """Composes the command line's config (in memory) and prints the help. Raises ConfigError
    when the overrides do not compose, like any other command line."""
    from experiments.engine.launcher.compose import CONF_DIR, compose_job  # the parent's composition, imported when asked

    cfg = compose_job(overrides_for_help(args))
    print(help_text(cfg, CONF_DIR), end="")
