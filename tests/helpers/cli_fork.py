"""`python run.py ARGS` for tests of what run.py refuses, in about 0.5 s instead of 4-5 s.

Every such test started an interpreter that imported torch, Hydra and the launcher before it
read its first argument: some 30 tests, 2 minutes of the suite. `RunPyForks` keeps one server
per test process (tests/helpers/cli_fork_server.py) that has imported them, and runs each command in a
child forked from it: run.py's own code as __main__, with the command's arguments, environment,
working directory, stdout, stderr and exit status. What a fork cannot show is what run.py
imports and how long that takes; the tests of those (test_config.py's "before torch loads" and
"leaves the ranks' heavy imports") and every test that launches ranks start a fresh interpreter
(conftest.run_cli).
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SERVER = REPO / "tests" / "helpers" / "cli_fork_server.py"


class RunPyForks:
    """One server, started on first use; `run` has conftest.run_cli's signature and result. The
    commands' stdout and stderr are files in `files`."""

    def __init__(self, files: Path) -> None:
        self.server: subprocess.Popen | None = None
        self.files = files
        self.count = 0

    def start(self) -> subprocess.Popen:
        if self.server is None or self.server.poll() is not None:
            self.server = subprocess.Popen(
                [sys.executable, str(SERVER)], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                start_new_session=True,  # its children are in its process group: close() ends them too
            )
        return self.server

    def run(self, args: list[str], env: dict[str, str] | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
        server = self.start()
        self.count += 1
        stdout, stderr = self.files / f"{self.count}.out", self.files / f"{self.count}.err"
        request = {"args": args, "env": {**os.environ, **(env or {})}, "cwd": str(REPO),
                   "stdout": str(stdout), "stderr": str(stderr)}
        server.stdin.write(json.dumps(request) + "\n")
        server.stdin.flush()
        ready, _, _ = select.select([server.stdout], [], [], timeout)
        if not ready:  # the child still runs: end the server with it, a fresh one serves the next
            self.close()
            raise subprocess.TimeoutExpired(["run.py", *args], timeout)
        answer = json.loads(server.stdout.readline())
        return subprocess.CompletedProcess(["run.py", *args], answer["returncode"], stdout.read_text(), stderr.read_text())

    def close(self) -> None:
        if self.server is not None:
            os.killpg(self.server.pid, signal.SIGKILL)  # the server and a command that timed out
            self.server.wait()
            self.server = None
