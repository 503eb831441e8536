"""blame.explain on the files a failed job leaves (error.rank<r>.txt, torchrun's report): the
first failure of its own is the cause, lost peers and torchrun's teardown are consequences.
The real processes are in test_stopping.py; these cover the orderings no run makes on demand."""
from __future__ import annotations

import os

from experiments.runformat import run_dir as run_files
from experiments.engine.launcher.blame import explain, merge_reports

RESET = "RuntimeError: [../gloo/transport/tcp/pair.cc:545] Read error [127.0.0.1]:935: Connection reset by peer."


def error_file(run_dir, rank: int, line: str, at: float) -> None:
    path = run_dir / run_files.error_file(rank)
    path.write_text(f"Traceback (most recent call last):\n  File \"x.py\", line 1\n{line}\n")
    os.utime(path, (at, at))


def report(failures=(), closed=(), stopped=(), **rest) -> dict:
    return {"pid": 100, "failures": list(failures), "closed": list(closed), "stopped": list(stopped),
            "signal": None, **rest}


def failure(rank: int, exitcode: int, pid: int, at: float = 1000.0) -> dict:
    names = {-9: "SIGKILL", -15: "SIGTERM"}
    return {"rank": rank, "local_rank": rank, "pid": pid, "exitcode": exitcode, "signal": names.get(exitcode),
            "time": at}


def test_a_killed_rank_is_the_cause_not_its_peers_nor_torchruns_teardown(tmp_path):
    error_file(tmp_path, 1, RESET, 999.0)  # written before torchrun even noticed rank 2
    error_file(tmp_path, 3, RESET, 999.1)
    agent = report(failures=[failure(0, -15, 10), failure(1, 1, 11), failure(2, -9, 12), failure(3, 1, 13)],
                   closed=[{"rank": 0, "pid": 10, "signal": "SIGTERM", "time": 1000.2}])
    blame = explain(tmp_path, 1, 100, True, agent, 1001.0, 300)
    assert blame["error"] == "rank 2 (pid 12) killed by SIGKILL"
    assert [(c["rank"], c["kind"]) for c in blame["consequences"]] == [(1, "peer"), (3, "peer"), (0, "teardown")]


def test_the_earliest_error_of_its_own_wins_over_earlier_lost_peers(tmp_path):
    error_file(tmp_path, 0, RESET, 999.0)
    error_file(tmp_path, 2, "InjectedFault: injected fault on rank 2 at step 3", 999.5)
    error_file(tmp_path, 1, "NonFiniteValue: non-finite loss at step 3 on rank 1", 999.7)
    blame = explain(tmp_path, 1, 100, True, report(), 1001.0, 300)
    assert blame["error"] == "rank 2: InjectedFault: injected fault on rank 2 at step 3"
    assert blame["cause"]["time"] == 999.5


def test_torchrun_killed_or_failing_is_the_cause(tmp_path):
    error_file(tmp_path, 1, RESET, 999.0)
    assert explain(tmp_path, -9, 100, True, None, 1001.0, 300)["error"] == "torchrun (pid 100) killed by SIGKILL"
    failed = explain(tmp_path, 1, 100, True, report(error="RendezvousTimeoutError: no quorum"), 1001.0, 300)
    assert failed["error"] == "torchrun (pid 100) failed: RendezvousTimeoutError: no quorum"
    single = explain(tmp_path, -9, 7, False, None, 1001.0, 300)
    assert single["error"] == "the worker process (pid 7, hosting every rank) killed by SIGKILL"


def test_a_stopped_rank_is_named_when_its_peers_only_timed_out(tmp_path):
    error_file(tmp_path, 0, "RuntimeError: Timed out waiting 5000ms for recv operation to complete", 999.0)
    agent = report(failures=[failure(0, 1, 10), failure(1, -15, 11)],
                   closed=[{"rank": 1, "pid": 11, "signal": "SIGTERM", "time": 1000.0}],
                   stopped=[{"rank": 1, "pid": 11, "time": 1000.0}])
    blame = explain(tmp_path, 1, 100, True, agent, 1001.0, 5)
    assert blame["error"].startswith("rank 1 (pid 11) was stopped") and "launcher.timeout_s=5 s" in blame["error"]


def test_another_nodes_killed_rank_is_the_cause_on_this_node_too(tmp_path):
    error_file(tmp_path, 0, RESET, 999.0)  # node 0's rank saw its peer on node 1 go
    node0 = report(failures=[failure(0, 1, 10)])
    node1 = report(failures=[failure(3, -9, 23), failure(2, -15, 22)],
                   closed=[{"rank": 2, "pid": 22, "signal": "SIGTERM", "time": 1000.1}])
    assert explain(tmp_path, 1, 100, True, node0, 1001.0, 300)["cause"]["kind"] == "peer"
    merged = merge_reports(node0, [node1])
    assert explain(tmp_path, 1, 100, True, merged, 1001.0, 300)["error"] == "rank 3 (pid 23) killed by SIGKILL"


def test_a_hosted_process_is_named_with_the_ranks_it_hosts(tmp_path):
    blame = explain(tmp_path, 1, 100, True, report(failures=[failure(1, -9, 11)]), 1001.0, 300, per_process=2)
    assert blame["error"] == "process 1 (ranks 2-3) (pid 11) killed by SIGKILL"
