"""`python run.py resume=<run dir>`: continue a stopped run in its own directory.

The run goes on with the config it was started with (its config.yaml, not a new composition),
from its newest complete checkpoint (experiments/engine/rank/checkpoint.py), or from step 0 if it stopped
before the first one. Each checkpoint's files are checked against its marker first
(experiments/runformat/checkpoint_integrity.py): a damaged one is skipped with one line saying why,
left in place and named in status.json (`damaged_checkpoints`); if every one is damaged, the
resume is refused before any process starts. metrics.jsonl keeps the steps the checkpoint had
seen; the lines logged after it move to metrics.dropped.jsonl, so no step appears twice. The W&B run is the same one
(its id is in env.json). A resume is recorded in env.json (`resumes`) and status.json.
"""
from __future__ import annotations

import fcntl
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from experiments.runformat.checkpoint_integrity import SKIP_VARIABLE, Damage, newest_intact
from experiments.runformat.errors import ConfigError
from experiments.engine.launcher.launch import run_to_end
from experiments.runformat.run_dir import CONFIG, ENV, ERROR_FILES, RESUME_LOCK
from experiments.runformat.store import RunStore


def resume_argument(args: list[str]) -> str | None:
    """The run directory of `resume=DIR`, or None; `resume=` takes no other override."""
    given = [arg for arg in args if arg.split("=")[0] == "resume"]
    if not given:
        return None
    others = [arg for arg in args if arg not in given]
    if others or len(given) > 1:
        raise ConfigError(f"resume=DIR continues a run with its own config.yaml and takes no other argument, "
                          f"got {' '.join(others or given[1:])}: start a new run to change the config")
    directory = given[0].split("=", 1)[1]
    if not directory:
        raise ConfigError("resume needs a run directory: python run.py resume=outputs/runs/<time>_<method>_w<W>")
    return directory


def _alive(status: dict[str, Any]) -> bool:
    """Whether the run.py that marked the run `running` still runs (on this host)."""
    pid = status.get("pid")
    if pid is None or status.get("host") != socket.gethostname():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_resumable(directory: str) -> RunStore:
    """The run directory's store, if it holds a run that can be resumed; else ConfigError."""
    store = RunStore(Path(directory))
    if store.dir.exists() and not store.dir.is_dir():
        raise ConfigError(f"resume={directory} is a file: give a run directory, e.g. outputs/runs/<time>_<method>_w<W>")
    try:
        status, env = store.status(), store.read_json(ENV)
    except ValueError as error:  # JSONDecodeError: a file cut or edited by hand
        raise ConfigError(f"resume={directory}: its status.json or env.json is not valid JSON ({error}): "
                          "that run cannot be resumed; start it again") from None
    if status is None or not store.path(CONFIG).exists() or env is None:
        raise ConfigError(f"resume={directory}: no run there (status.json, config.yaml and env.json are what "
                          f"run.py writes): give a run directory, e.g. outputs/runs/<time>_<method>_w<W>")
    if status["status"] == "done":
        raise ConfigError(f"resume={directory}: that run is done already (status.json): nothing to resume")
    if status["status"] == "running" and _alive(status):
        raise ConfigError(f"resume={directory}: that run is still running (run.py pid {status['pid']}): "
                          "stop it first (kill it, or Ctrl-C), then resume")
    return store


def resume(directory: str) -> dict[str, Any]:
    """Validates and resumes the run in `directory`; returns its summary (with `status`)."""
    store = check_resumable(directory)
    lock = _lock(store, directory)  # held until this process ends: one resume at a time
    try:
        cfg = OmegaConf.load(store.path(CONFIG))
    except Exception as error:  # a parser's error: the file was cut or edited by hand
        raise ConfigError(f"resume={directory}: its config.yaml does not parse ({str(error).splitlines()[0]}): "
                          "that run cannot be resumed; start it again") from None
    if cfg.launcher.nnodes > 1:
        raise ConfigError(f"resume={directory}: a run on launcher.nnodes={cfg.launcher.nnodes} nodes is not resumed "
                          "this way; run it with launcher.max_restarts=N, and torchrun restarts it from its checkpoints")
    if "checkpoint" not in cfg:
        raise ConfigError(f"resume={directory}: that run was started by a sparsebench without checkpoints "
                          "(no checkpoint section in its config.yaml): start it again")
    from experiments.engine.launcher.validate import validate  # here: they load torch, which
    from experiments.engine.rank.checkpoint import complete_steps  # `resume=` with bad input never needs

    validate(cfg)  # the data, the output directory and W&B may have changed since
    steps = complete_steps(store.dir)
    from_step, damaged = _intact_start(store, directory, steps)
    env = store.read_json(ENV)
    resumes = env.setdefault("resumes", [])
    resumes.append({"time": time.time(), "from_step": from_step, "host": socket.gethostname(), "argv": sys.argv})
    store.write_json(ENV, env)
    store.set_aside([path.name for path in store.dir.glob(ERROR_FILES)], f"resume-{len(resumes)}")
    store.set_status("running", pid=os.getpid(), host=socket.gethostname(), resumed=time.time(), resumes=len(resumes),
                     **_damage_field(damaged))
    print(f"resuming {store.dir} from step {from_step}" + ("" if steps else " (no checkpoint yet)"), flush=True)
    try:
        return run_to_end(cfg, store, env, existed=True)
    finally:
        lock.close()


def _intact_start(store: RunStore, directory: str, steps: list[int]) -> tuple[int, list[Damage]]:
    """The step to resume from (the newest intact checkpoint; 0 if there is no checkpoint) and
    the damaged checkpoints newer than it; ConfigError if there are checkpoints and none is intact.
    The workers learn the damaged steps through SKIP_VARIABLE, so they load exactly this one."""
    if not steps:
        return 0, []
    step, damaged = newest_intact(store.dir, steps)
    if damaged:
        os.environ[SKIP_VARIABLE] = ",".join(str(found.step) for found in damaged)
    if step is None:
        previous = {key: value for key, value in store.status().items() if key != "updated"}
        store.set_status(previous.pop("status"), **previous, **_damage_field(damaged))
        named = "; ".join(f"step {found.step}: {found.reason}" for found in damaged)
        raise ConfigError(f"resume={directory}: no intact checkpoint to resume from ({named}).\n"
                          "They are left in place (status.json names them): restore the files, or start the run again")
    if damaged:
        named = "; ".join(f"step {found.step}: {found.reason}" for found in damaged)
        print(f"skipping damaged checkpoint {named}; resuming from step {step}", flush=True)
    return step, damaged


def _damage_field(damaged: list[Damage]) -> dict[str, Any]:
    """status.json's `damaged_checkpoints`: each skipped checkpoint's step and why (none: no field)."""
    if not damaged:
        return {}
    return {"damaged_checkpoints": [{"step": found.step, "reason": found.reason} for found in damaged]}


def _lock(store: RunStore, directory: str):
    """An exclusive lock on the run directory (its .resume.lock), or ConfigError if another
    run.py holds it: two resumes started together would both train into one directory."""
    handle = open(store.path(RESUME_LOCK), "a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ConfigError(f"resume={directory}: another run.py is resuming that run right now: "
                          "wait for it (or stop it), then resume") from None
    try:
        check_resumable(directory)  # again, under the lock: another resume may have run meanwhile
    except ConfigError:
        handle.close()
        raise
    return handle
