"""Serves `python run.py ARGS` to the tests that expect run.py to refuse its input, without paying
run.py's start-up each time (tests/helpers/cli_fork.py is the client and says when that is fair).

It imports what run.py imports on its way to a refusal (Hydra, the launcher, torch for the
validation: 3-4 s of every run.py start here), then for each request forks a child that runs
run.py itself as __main__: its argv, environment, working directory, stdout and stderr are the
request's, and its exit status is run.py's. The server runs no torch operation and starts no
thread, so the fork copies a process that is safe to copy.

Protocol: one JSON request per line on stdin ({"args", "env", "cwd", "stdout", "stderr"}, the
last two file paths), one JSON answer per line on stdout ({"returncode"}).
"""
from __future__ import annotations

import json
import os
import runpy
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUN_PY = str(REPO / "run.py")


def preload() -> None:
    """What run.py imports before it refuses anything (module-level and validate's), imported
    once here; run.py's own module-level code still runs in every child."""
    sys.path[0] = str(REPO)  # as `python run.py` has it
    import hydra  # noqa: F401
    import torch  # noqa: F401

    import experiments.engine.launcher.compose  # noqa: F401
    import experiments.engine.launcher.help  # noqa: F401
    import experiments.engine.launcher.launch  # noqa: F401
    import experiments.engine.launcher.resume  # noqa: F401
    import experiments.engine.launcher.schema  # noqa: F401
    import experiments.engine.launcher.validate  # noqa: F401


def exit_code(exit: SystemExit) -> int:
    """What the interpreter makes of SystemExit's argument."""
    if exit.code is None:
        return 0
    if isinstance(exit.code, int):
        return exit.code
    print(exit.code, file=sys.stderr)
    return 1


def run_child(request: dict) -> None:
    """In the forked child: become `python run.py ARGS` with the request's files, then end."""
    code = 1
    try:
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.argv = [RUN_PY, *request["args"]]
        try:
            runpy.run_path(RUN_PY, run_name="__main__")
            code = 0
        except SystemExit as exit:
            code = exit_code(exit)
        except BaseException:  # as the interpreter would report it
            traceback.print_exc()
            code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve() -> None:
    answers = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        answers.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            run_child(request)
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
        answers.flush()


if __name__ == "__main__":
    preload()
    serve()
