"""One run on several nodes: two torchrun agents on localhost as two nodes (launcher.nnodes=2,
one rendezvous endpoint on 127.0.0.1, 2 processes each, W=4) sharing one run directory, as
nodes share a filesystem. Both end done; the node that hosted rank 0 writes the results, the
other says where they are; no node overwrites the other's files."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from experiments.runformat import run_dir as run_files
from experiments.engine.launcher.compose import compose_job
from experiments.engine.rank.nodes import rendezvous_id
from experiments.runformat.run_dir import read_metrics
from tests.conftest import REPO, TINY_RUN
from tests.test_stopping import kill_tree, process_tree

SMALL = ["dataset=synthetic", "dataset.num_train=64", "dataset.num_test=16", "model=mlp", "model.hidden=16"]
DEADLINE_S = 240


def test_every_node_derives_the_same_rendezvous_id():
    """Not from the run directory, which differs per node unless shared; from the config."""
    nodes = ["launcher.nnodes=2", "launcher.rdzv_endpoint=node0:29400", *SMALL]
    first = rendezvous_id(compose_job([*nodes, "hydra.run.dir=/scratch/node0/run"]))
    assert first == rendezvous_id(compose_job([*nodes, "hydra.run.dir=/scratch/node1/run"]))
    assert first != rendezvous_id(compose_job([*nodes, "tag=second"]))  # a name tells two runs apart
    assert first != rendezvous_id(compose_job([*nodes, "seed=1"]))
    assert rendezvous_id(compose_job([*nodes, "launcher.rdzv_id=mine"])) == "mine"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_nodes(nodes: list[subprocess.Popen], deadline_s: float) -> list[tuple[str, str]]:
    """Every node's (stdout, stderr) once all have ended. A node that fails while another still
    runs fails the test at once with its own error: the other would wait out its rendezvous
    (join_timeout) and the test would report only a timeout. Fails after `deadline_s`."""
    outputs: list[tuple[str, str] | None] = [None] * len(nodes)
    deadline = time.monotonic() + deadline_s
    while None in outputs:
        assert time.monotonic() < deadline, f"the nodes did not end within {deadline_s} s"
        for number, node in enumerate(nodes):
            if outputs[number] is None:
                try:
                    outputs[number] = node.communicate(timeout=0.5)
                except subprocess.TimeoutExpired:
                    continue
                assert node.returncode == 0 or None not in outputs, (
                    f"node {number} exited {node.returncode} while the other still ran:\n{outputs[number][1][-3000:]}")
    return outputs


@pytest.mark.slow
def test_two_agents_on_localhost_as_two_nodes_end_done_in_one_run_directory(tmp_path):
    run_dir = tmp_path / "run"
    args = [*TINY_RUN, "workers=4", "processes=4", "max_steps=6", "launcher.nnodes=2",
            f"launcher.rdzv_endpoint=127.0.0.1:{free_port()}", "launcher.threads_per_process=1",
            "launcher.timeout_s=60", f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "WANDB_MODE": "disabled"}
    nodes = []
    trees: set[int] = set()
    try:
        for _ in range(2):
            nodes.append(subprocess.Popen([sys.executable, "run.py", *args], cwd=REPO, env=env, text=True,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE))
            # The second node starts once Hydra has begun the first's run directory: it must join
            # it, whether or not the first node has marked the run running by then (CI caught
            # the second node refusing it; test_bad_input.py pins that moment down).
            begun = time.monotonic() + 60
            while not (run_dir / ".hydra" / run_files.CONFIG).exists() and time.monotonic() < begun:
                time.sleep(0.05)
        trees = process_tree(nodes[0].pid) | process_tree(nodes[1].pid)
        outputs = wait_for_nodes(nodes, DEADLINE_S)
        for node, (stdout, stderr) in zip(nodes, outputs):
            assert node.returncode == 0, stderr[-3000:]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.send_signal(signal.SIGTERM)
                node.wait(timeout=30)
        kill_tree(trees)
    stdouts = [stdout for stdout, _ in outputs]
    assert sum("results: " in out for out in stdouts) == 1  # the node with rank 0 prints the summary
    assert sum(f"node done: this node's ranks finished; the results are in {run_dir}" in out for out in stdouts) == 1
    assert run_files.read_json(run_dir / run_files.STATUS)["status"] == "done"
    per_node = sorted(run_dir.glob("status.*.json"))
    assert len(per_node) == 2 and all(json.loads(path.read_text())["status"] == "done" for path in per_node)
    assert len(list(run_dir.glob("env.*.json"))) == 2 and len(list(run_dir.glob("agent.*.json"))) == 2
    summary = run_files.read_json(run_dir / run_files.SUMMARY)
    assert summary["steps"] == 6, summary
    steps = [row["step"] for row in read_metrics(run_dir / run_files.METRICS) if row["kind"] == "train"]
    assert steps == list(range(6))  # each step once: only rank 0 logs
