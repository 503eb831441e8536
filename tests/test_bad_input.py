"""Bad input of every class stops before launch: exit code 2, one line naming the key or the
file, no traceback, no run directory.

Two tables. `CLI_CASES` go through the real command line (`python run.py ...`), one or more per
class. `PREFLIGHT_CASES` call the same preflight run.py calls first (experiments/engine/launcher/compose.py), in
this interpreter: a Python and Hydra start-up per case would cost ~3 s each, and preflight is
where every one of these fails.
"""
from __future__ import annotations

import gzip
import os
import re
import socket
import time
from pathlib import Path

import pytest
from hydra.core.utils import _save_config
from omegaconf import open_dict, read_write

from experiments.engine.launcher.compose import compose_job, preflight
from experiments.engine.launcher.environment_checks import check_wandb_reachable
from experiments.runformat.errors import ConfigError
from experiments.runformat.run_dir import CONFIG
from experiments.runformat.store import RunStore
from tests.conftest import run_cli

BASE = ["dataset=digits", "model=mlp", "logger=local"]
# A model whose residual makes 100,000 hosted ranks need terabytes on any machine.
BIG_MODEL = ["model=mlp", "model.hidden=1024"]


def _garbage_cifar(root: Path) -> Path:
    """A CIFAR-10 folder whose first batch file is garbage (the others never get read)."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (folder / name).write_bytes(b"not a pickle at all")
    return folder / "data_batch_1"


def _truncated_fashion_mnist(root: Path) -> Path:
    """Fashion-MNIST's four files, the training images cut after their header and 1,000 bytes."""
    root.mkdir(parents=True)
    header = b"\x00\x00\x08\x03" + (60000).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2
    with gzip.open(root / "train-images-idx3-ubyte.gz", "wb") as handle:
        handle.write(header + bytes(1000))
    for name in ("train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        (root / name).write_bytes(b"")
    return root / "train-images-idx3-ubyte.gz"


# (id, args, environment, expected pattern); `{tmp}` is the test's own folder.
CLI_CASES = [
    ("negative lr", ["optimizer.lr=-1"], {}, r"optimizer\.lr must be >= 0, got -1"),
    ("infinite lr", ["optimizer.lr=inf"], {}, r"optimizer\.lr must be a finite number, got inf"),
    ("infinite bandwidth", ["network.bandwidth_gbit=inf"], {}, r"network\.bandwidth_gbit must be a finite number, got inf"),
    ("non-numeric density", ["sparsifier.density=abc"], {}, r"sparsifier\.density must be a number, got 'abc'"),
    ("no batch", ["dataset=synthetic", "dataset.num_train=64", "batch_size=32"], {},
     r"batch_size=32 leaves each of workers=4 without a batch.*16 examples.*raise dataset\.num_train"),
    ("comma list without -m", ["workers=2,4"], {}, r"workers=2,4: .*did you mean -m \(a sweep\)\?"),
    ("too many hosted ranks", ["workers=100000", "processes=1", *BIG_MODEL], {},
     r"workers=100000 processes=1 needs about .*100000 hosted rank\(s\).* available: lower workers"),
    ("output_root is a file", ["output_root={tmp}/afile"], {}, r"output_root: .*afile is a file"),
    ("garbage dataset file", ["dataset=cifar10", "data_dir={tmp}/cifar"], {}, r"cifar-10-batches-py/data_batch_1: not a complete pickle"),
    ("W&B online without network", [], {"WANDB_MODE": "online", "WANDB_API_KEY": "0" * 40},
     r"WANDB_MODE=online \(the environment variable, which wins over logger\.wandb_mode\): W&B at api\.wandb\.ai:443 is unreachable"),
    ("W&B mode mistyped in the environment", [], {"WANDB_MODE": "onlin"},
     r"the environment variable WANDB_MODE=onlin must be offline, online or disabled"),
    ("--cfg validates", ["--cfg", "job", "optimizer.weight_decay=-0.1"], {}, r"optimizer\.weight_decay must be >= 0"),
]


def _prepare(tmp_path: Path) -> Path:
    """The files some cases name; returns the folder runs must stay out of."""
    (tmp_path / "afile").write_text("a file, not a folder")
    _garbage_cifar(tmp_path / "cifar")
    out = tmp_path / "out"
    out.mkdir()
    return out


def _assert_one_line(stderr: str, pattern: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert re.search(pattern, lines[0]), lines[0]


@pytest.mark.parametrize("args,env,pattern", [case[1:] for case in CLI_CASES], ids=[case[0] for case in CLI_CASES])
def test_bad_input_through_the_command_line(args, env, pattern, tmp_path, run_py_before_launch):
    out = _prepare(tmp_path)
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    given = {arg.split("=")[0] for arg in args}
    extra = [arg for arg in BASE if arg.split("=")[0] not in given and not (arg.startswith("model=") and "model.hidden" in given)]
    if not any(arg.startswith("output_root=") for arg in args):
        extra.append(f"output_root={out}")
    started = time.monotonic()
    result = run_py_before_launch([*args, *extra], env={"WANDB_MODE": "disabled", **env}, timeout=120)
    elapsed = time.monotonic() - started
    assert result.returncode == 2, result.stderr
    _assert_one_line(result.stderr, pattern)
    assert "Traceback" not in result.stderr + result.stdout
    assert not any(out.iterdir()), "no run directory may be created for bad input"
    assert elapsed < 30, f"bad input must fail at once, took {elapsed:.1f} s"


PREFLIGHT_CASES = [
    # not finite: one rule for every number (NaN and inf pass comparisons written the wrong way)
    ("optimizer.lr=inf", [], r"^optimizer\.lr must be a finite number, got inf: set optimizer\.lr to a finite value$"),
    ("optimizer.lr=nan", [], r"^optimizer\.lr must be a finite number, got nan"),
    ("sparsifier.density=nan", [], r"^sparsifier\.density must be a finite number, got nan"),
    ("network.bandwidth_gbit=inf", [], r"^network\.bandwidth_gbit must be a finite number, got inf"),
    ("optimizer.momentum=-inf", [], r"^optimizer\.momentum must be a finite number, got -inf"),
    ("schedule.milestones=[10,inf]", ["schedule=step"], r"^schedule\.milestones\[1\] must be a finite number, got inf"),
    ("schedule.decay_factor=nan", ["schedule=step"], r"^schedule\.decay_factor must be a finite number"),
    ("network.latency_us=nan", [], r"^network\.latency_us must be a finite number"),
    ("sparsifier.clip_norm=inf", ["sparsifier=dgc"], r"^sparsifier\.clip_norm must be a finite number"),
    # optimizer
    ("optimizer.lr=abc", [], r"optimizer\.lr must be a number, got 'abc'"),
    ("optimizer.momentum=-0.5", [], r"optimizer\.momentum must be in \[0, 1\), got -0.5"),
    ("optimizer.weight_decay=abc", [], r"optimizer\.weight_decay must be a number"),
    ("optimizer.lr=-1", ["optimizer=adam"], r"optimizer\.lr must be >= 0"),
    ("optimizer.norm_weight_decay=-1", ["optimizer=released_sgd", "sparsifier=topk"], r"optimizer\.norm_weight_decay must be >= 0"),
    # sparsifier
    ("sparsifier.density=true", [], r"sparsifier\.density must be a number, got True"),
    ("sparsifier.error_feedback=1", [], r"sparsifier\.error_feedback must be true or false, got 1"),
    ("sparsifier.momentum=abc", ["sparsifier=dgc"], r"sparsifier\.momentum must be a number"),
    ("sparsifier.warmup=yes", ["sparsifier=dgc"], r"sparsifier\.warmup must be true or false"),
    ("sparsifier.blocks=many", ["sparsifier=exdyna"], r"sparsifier\.blocks must be an integer"),
    # model
    ("model.hidden=0", [], r"model\.hidden must be >= 1, got 0"),
    ("model.hidden=1.5", [], r"model\.hidden must be an integer, got 1.5"),
    ("model.depth=-1", [], r"model\.depth must be >= 0"),
    ("model.width=wide", ["model=cnn"], r"model\.width must be an integer"),
    # dataset
    ("dataset.num_train=abc", ["dataset=synthetic"], r"dataset\.num_train must be an integer"),
    ("dataset.num_classes=1", ["dataset=synthetic"], r"dataset\.num_classes must be >= 2"),
    ("dataset.noise=-1", ["dataset=synthetic"], r"dataset\.noise must be >= 0"),
    ("dataset.test_fraction=1", [], r"dataset\.test_fraction must be in \(0, 1\)"),
    ("batch_size=2000", [], r"batch_size=2000 leaves each of workers=4 without a batch.*lower dataset\.test_fraction"),
    ("dataset.stand_in_verses=50", ["dataset=wikitext2", "dataset.if_missing=stand_in", "model=lstm"], r"dataset\.stand_in_verses must be"),
    # schedule
    ("schedule.milestones=abc", ["schedule=step"], r"schedule\.milestones must be a list of numbers"),
    ("schedule.decay_factor=0", ["schedule=step"], r"schedule\.decay_factor must be > 0"),
    ("schedule.milestones=[10,-1]", ["schedule=step"], r"every entry of schedule\.milestones must be >= 0"),
    ("sparsifier.clip_norm=abc", ["sparsifier=dgc"], r"sparsifier\.clip_norm must be a number or null"),
    # top level, launcher, logger, network
    ("workers=four", [], r"workers=four: Value 'four'.*: workers takes an integer"),
    ("checkpoint.every_steps=1.5", [], r"checkpoint\.every_steps=1\.5: .*checkpoint\.every_steps takes an integer"),
    ("launcher.rdzv_endpoint=garbage", ["workers=2", "launcher.nnodes=2"], r"launcher\.rdzv_endpoint=<node0-host>:29400"),
    ("seed=-1", [], r"seed must be >= 0"),
    ("position_bins=-1", [], r"position_bins must be >= 0"),
    ("eval_near=-0.1", [], r"eval_near must be >= 0"),
    ("eval_near_every=0", [], r"eval_near_every must be >= 1"),
    ("stop_at_target=true", [], r"stop_at_target=true needs eval_target"),
    ("eval_target=high", [], r"eval_target=high: .*"),
    ("logger.progress=maybe", [], r"logger\.progress=maybe: Value 'maybe' is not a valid bool"),
    ("launcher.max_restarts=-1", [], r"launcher\.max_restarts must be >= 0"),
    ("launcher.threads_per_process=0", [], r"launcher\.threads_per_process must be >= 1 or null"),
    ("launcher.rdzv_backend=zookeeper", [], r"launcher\.rdzv_backend must be one of c10d"),
    ("launcher.rdzv_endpoint=nohostport", [], r"launcher\.rdzv_endpoint must be host:port"),
    ("launcher.rdzv_timeout_s=0", [], r"launcher\.rdzv_timeout_s must be > 0"),
    ("launcher.nnodes=0", [], r"launcher\.nnodes must be >= 1"),
    ("network.latency_us=-1", [], r"network\.latency_us must be >= 0"),
    ("network.gpus_per_node=4", [], r"^network\.intra_latency_us is null but network\.gpus_per_node=4 needs an intra-node link: "
     r"set network\.intra_latency_us and network\.intra_bandwidth_gbit .*, or network\.gpus_per_node=1$"),
    ("network.algorithm=fastest", ["network=v100x4_10gbe"], r"^network\.algorithm must be one of auto, ring, hierarchical, tree"),
    ("sparsifier=topk,dense", [], r"did you mean -m \(a sweep\)\? python run\.py -m sparsifier=topk,dense"),
    ("optimizer.momentum=abc", [], r"optimizer\.momentum must be a number, got 'abc'"),
    ("sparsifier.error_feedback=maybe", ["sparsifier=micro"], r"sparsifier\.error_feedback must be true or false"),
    ("checkpoint.every_steps=-5", [], r"checkpoint\.every_steps must be an integer >= 0"),
    ("checkpoint.keep=0", [], r"checkpoint\.keep must be an integer >= 1"),
    ("checkpoint.epoch_end=maybe", [], r"checkpoint\.epoch_end=maybe: Value 'maybe' is not a valid bool"),
    ("reduction=tree", [], r"reduction must be ring or rank_order, got tree"),
    ("on_nonfinite=ignore", [], r"on_nonfinite must be fail or skip, got ignore"),
    ("max_skipped_steps=0", [], r"max_skipped_steps must be >= 1"),
    # resources
    ("workers=100000", [], r"workers=100000 processes=100000 needs about .* available: host several ranks per process"),
    ("launcher.nnodes=2", ["workers=2"], r"launcher\.nnodes=2 needs .*launcher\.rdzv_endpoint"),
    # environment
    ("output_root=/proc/sparsebench", [], r"output_root: cannot create /proc/sparsebench"),
    ("dataset.download=true", ["dataset=cifar10", "data_dir={tmp}/none"], r"dataset\.download=true, but www\.cs\.toronto\.edu is unreachable"),
    ("output_root=/sys/sparsebench", [], r"output_root: cannot create /sys/sparsebench.*not writable"),
    ("hydra.run.dir={tmp}/afile/run", [], r"hydra\.run\.dir: .*afile is a file"),
    ("dataset=fashion_mnist", ["data_dir={tmp}/fmnist", "dataset.system_dir={tmp}/none"],
     r"fmnist/train-images-idx3-ubyte\.gz: shape \(60000, 28, 28\) with 1000 data bytes.*truncated"),
    ("dataset.download=true", ["dataset=fashion_mnist", "data_dir={tmp}/none", "dataset.system_dir={tmp}/none"],
     r"fashion-mnist\.s3-website\.eu-central-1\.amazonaws\.com is unreachable"),
]


@pytest.mark.parametrize("arg,more,pattern", [case for case in PREFLIGHT_CASES], ids=[case[0] for case in PREFLIGHT_CASES])
def test_bad_input_fails_in_preflight(arg, more, pattern, tmp_path):
    out = _prepare(tmp_path)
    _truncated_fashion_mnist(tmp_path / "fmnist")
    args = [a.replace("{tmp}", str(tmp_path)) for a in [arg, *more]]
    given = {a.split("=")[0] for a in args}
    base = [a for a in BASE if a.split("=")[0] not in given and not (a.startswith("model=") and given & {"model.width"})]
    if "output_root" not in given:
        base.append(f"output_root={out}")
    with pytest.raises(ConfigError) as caught:
        preflight([*args, *base])
    message = str(caught.value)
    assert "\n" not in message and re.search(pattern, message), message
    assert not any(out.iterdir())


def test_a_batch_that_just_fits_passes(tmp_path):
    """The check cuts shards as the task does: 128 examples over 4 workers give one batch of 32."""
    preflight(["dataset=synthetic", "dataset.num_train=128", "batch_size=32", *BASE[1:], f"output_root={tmp_path}"])
    with pytest.raises(ConfigError, match="without a batch"):
        preflight(["dataset=synthetic", "dataset.num_train=124", "batch_size=32", *BASE[1:], f"output_root={tmp_path}"])


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only mode folder (sysfs is the case for root)")
def test_read_only_output_root(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        with pytest.raises(ConfigError, match=r"output_root: cannot create .*locked.*not writable"):
            preflight([*BASE, f"output_root={locked}"])
    finally:
        locked.chmod(0o755)


def test_wandb_check_gives_up_within_its_timeout(monkeypatch):
    """A host that never answers fails after the short timeout: a local listener whose backlog
    (0) is full drops further SYNs, so a connect waits like one to a dead network."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port), timeout=1)  # takes the one backlog slot
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    started = time.monotonic()
    try:
        with pytest.raises(ConfigError, match=rf"W&B at 127\.0\.0\.1:{port} is unreachable \(checked for 0\.5 s: no answer\)"):
            check_wandb_reachable(timeout_s=0.5)
    finally:
        filler.close()
        server.close()
    assert time.monotonic() - started < 3


def test_an_existing_run_is_refused_and_left_untouched(tmp_path, run_py_before_launch):
    """hydra.run.dir=<a run> is refused before Hydra writes its .hydra/ into that run. The run is
    laid out as launch.py and Hydra leave one (a real run costs ~30 s here for nothing more)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    RunStore(run_dir).set_status("done", ended=1.0)
    (run_dir / ".hydra").mkdir()
    for name in ("config.yaml", "hydra.yaml", "overrides.yaml"):
        (run_dir / ".hydra" / name).write_text(f"# the earlier run's {name}\n")
    before = {path: path.read_bytes() for path in run_dir.rglob("*") if path.is_file()}
    result = run_py_before_launch([*BASE, "workers=2", f"hydra.run.dir={run_dir}"], env={"WANDB_MODE": "disabled"}, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    _assert_one_line(result.stderr, rf"hydra\.run\.dir: {re.escape(str(run_dir))} already holds a run \(status\.json exists\)")
    after = {path: path.read_bytes() for path in run_dir.rglob("*") if path.is_file()}
    assert after == before, "the existing run's files (its .hydra/ included) must stay byte-identical"


def test_a_folder_with_only_hydra_files_is_refused_too(tmp_path):
    (tmp_path / "run" / ".hydra").mkdir(parents=True)
    (tmp_path / "run" / ".hydra" / "config.yaml").write_text("workers: 4\n")
    with pytest.raises(ConfigError, match=r"already holds a run \(\.hydra/config\.yaml exists\)"):
        preflight([*BASE, f"hydra.run.dir={tmp_path / 'run'}"])


@pytest.mark.slow
def test_a_rendezvous_that_cannot_complete_fails_after_its_timeout(tmp_path):
    """launcher.nnodes=2 with only this node started: torchrun gives up after
    launcher.rdzv_timeout_s, and the run says why instead of hanging."""
    started = time.monotonic()
    result = run_cli([*BASE, "workers=2", "max_steps=1", "launcher.nnodes=2", "launcher.rdzv_endpoint=localhost:29531",
                      "launcher.rdzv_timeout_s=3", f"output_root={tmp_path}"], env={"WANDB_MODE": "disabled"}, timeout=120)
    assert time.monotonic() - started < 60
    assert result.returncode == 1
    assert "the rendezvous at localhost:29531 did not complete within launcher.rdzv_timeout_s=3 s" in result.stderr


def test_a_sweep_into_an_existing_sweep_is_refused_naming_the_job_dir(tmp_path):
    """Each job's directory (sweep.dir/subdir, as Hydra names it) is checked, not only the first."""
    job = tmp_path / "sweep" / "1_topk_w2"
    job.mkdir(parents=True)
    RunStore(job).set_status("done", ended=1.0)
    assert preflight(["-m", "workers=1,2", *BASE, f"hydra.sweep.dir={tmp_path / 'other'}"]) == 2
    with pytest.raises(ConfigError, match=rf"hydra\.sweep\.dir: {re.escape(str(job))} already holds a run"):
        preflight(["-m", "workers=1,2", *BASE, f"hydra.sweep.dir={tmp_path / 'sweep'}"])


def _hydra_writes_config(run_dir: Path, overrides: list[str]) -> None:
    """.hydra/config.yaml as Hydra's run_job writes it: the task config, hydra key removed, unresolved."""
    cfg = compose_job(overrides)
    with read_write(cfg), open_dict(cfg):
        del cfg["hydra"]
    _save_config(cfg, CONFIG, run_dir / ".hydra")


@pytest.mark.parametrize("differs", [[], ["seed=7"], ["launcher.nnodes=1"]], ids=["same", "other-seed", "one-node"])
def test_a_node_starting_in_the_same_run_dir_is_joined_not_refused(tmp_path, differs):
    """Two nodes started together: Hydra has written the first node's .hydra/config.yaml and the
    node has not yet marked the run running. The second node joins if it is the same multi-node
    run (found by CI, where the second node was refused); any other config is still refused."""
    run_dir = tmp_path / "run"
    nodes = [*BASE, "workers=2", "launcher.nnodes=2", "launcher.rdzv_endpoint=127.0.0.1:29533", f"hydra.run.dir={run_dir}"]
    _hydra_writes_config(run_dir, nodes)
    if not differs:
        assert preflight(nodes) == 1
        return
    with pytest.raises(ConfigError, match=r"already holds a run \(\.hydra/config\.yaml exists\)"):
        preflight([*nodes, *differs])
