"""The example of docs/ddp_hook.md, "Use a sparsifier in your own DDP script" (examples/ddp_train.py), run as
a user runs it: under torchrun, 2 gloo processes, a real torchvision ResNet-18 on FakeData.

Three runs: 3 steps, then `--resume` of it to 6 steps with W&B offline, and a straight 6-step
run beside them. The stats file must hold one row per step with the hook's statistics, the W&B
offline record each step's sparsebench/ keys at that step, and the resumed run must continue
the straight run exactly: the same selections' counts, traffic and loss at every step, and the
same hook state (residual and method state) at the end. A fourth run trains on an ImageFolder.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from experiments.runformat import metric_keys as keys
from tests.conftest import REPO, run_world
from tests.helpers.wandb_records import records

pytestmark = pytest.mark.slow  # four torchrun jobs: about 32 s on 2 cores

EXAMPLE = str(REPO / "examples" / "ddp_train.py")
# Small enough for 2 CPU cores, still the real model: 11.2 M parameters, 16x16 images.
TINY = ["--model", "resnet18", "--image-size", "16", "--batch-size", "4", "--fake-images", "32"]
STEPS_PER_EPOCH = 32 // 2 // 4  # 32 images, 2 ranks, batches of 4
FIRST, TOTAL = 3, 6  # the resumed run starts inside epoch 0 and crosses into epoch 1
HOOK_KEYS = (keys.SENT_MAX, keys.SENT_MEAN, keys.RECV_MAX, keys.DENSE_BYTES, keys.RATIO, keys.DENSITY_ACTUAL,
             keys.DENSITY_TARGET, keys.BUILDUP, keys.HOOK_SELECT, keys.HOOK_EXCHANGE, keys.HOOK_TOTAL,
             keys.HOOK_BUCKETS, keys.HOOK_RESIDUAL, keys.HOOK_REL_RESIDUAL)
# Determined by the gradients alone (no clock): a resumed run must reproduce them exactly.
EXACT_KEYS = ("loss", keys.SENT_MAX, keys.SENT_MEAN, keys.RECV_MAX, keys.DENSITY_ACTUAL, keys.DENSITY_ERROR,
              keys.K_MAX, keys.K_MEAN, keys.HOOK_RESIDUAL, keys.HOOK_REL_RESIDUAL)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("ddp_example")
    resumed, straight = out / "resumed", out / "straight"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("WANDB_MODE", "disabled")
        run_world([EXAMPLE, *TINY, "--steps", str(FIRST), "--out", str(resumed)], processes=2)
        run_world([EXAMPLE, *TINY, "--steps", str(TOTAL), "--out", str(straight)], processes=2)
    with pytest.MonkeyPatch.context() as env:  # W&B on the resumed run: its first row is the tricky one
        env.setenv("WANDB_MODE", "offline")  # the W&B run is written to a file, never sent
        run_world([EXAMPLE, *TINY, "--steps", str(TOTAL), "--out", str(resumed), "--resume", "--wandb", "offline"], processes=2)
    return {"resumed": resumed, "straight": straight}


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "stats.jsonl").read_text().splitlines()]


def test_one_row_per_step_with_the_hooks_statistics(runs):
    logged = rows(runs["resumed"])
    assert [row["step"] for row in logged] == list(range(TOTAL)), "the resumed run continues the step count"
    for row in logged:
        missing = [key for key in HOOK_KEYS if key not in row]
        assert not missing, f"step {row['step']}: no {missing}"
        assert 0 < row[keys.DENSITY_ACTUAL] <= 2 * row[keys.DENSITY_TARGET] and row[keys.DENSITY_TARGET] == 0.01
        assert 0 < row[keys.SENT_MAX] < row[keys.DENSE_BYTES] / 10, "density 0.01 must send far less than dense"
        assert row[keys.BUILDUP] == 1.0  # DEFT's disjoint selections: no build-up
        assert row[keys.HOOK_RESIDUAL] > 0 and 0 < row[keys.HOOK_REL_RESIDUAL] < 1
        assert 0 <= row[keys.HOOK_SELECT] <= row[keys.HOOK_TOTAL] and row[keys.HOOK_BUCKETS] >= 1
        assert math.isfinite(row["loss"]) and row["loss"] > 0
        assert row["epoch"] == row["step"] // STEPS_PER_EPOCH


def test_the_wandb_offline_run_holds_each_steps_sparsebench_keys(runs):
    files = sorted((runs["resumed"] / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1, f"one W&B run inside --out, got {files}"
    history = {}
    for record in records(files[0]):
        if record.WhichOneof("record_type") == "history":
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            history[record.history.step.num] = items
    # The resumed steps only, each row whole: the hook's stats (logged uncommitted during
    # backward) in the same row as the example's loss, from the first resumed step on.
    assert sorted(history) == list(range(FIRST, TOTAL))
    for row in rows(runs["resumed"])[FIRST:]:
        logged = history[row["step"]]
        # the hook's numbers of this very step, not the next one's (they are logged uncommitted)
        assert logged["sparsebench/step"] == row["step"]
        for key in HOOK_KEYS:
            assert logged["sparsebench/" + key] == pytest.approx(row[key], rel=1e-12), key
        assert logged["train/loss"] == pytest.approx(row["loss"], rel=1e-12)


def test_a_resumed_run_continues_the_straight_run_exactly(runs):
    resumed, straight = rows(runs["resumed"]), rows(runs["straight"])
    assert len(resumed) == len(straight) == TOTAL
    for a, b in zip(resumed, straight):
        for key in EXACT_KEYS:
            assert a[key] == b[key], f"step {a['step']}: {key} {a[key]} (resumed) != {b[key]} (straight)"
    for rank in range(2):
        a, b = (torch.load(runs[name] / f"checkpoint.rank{rank}.pt", weights_only=False) for name in ("resumed", "straight"))
        assert a["step"] == b["step"] == a["hook"]["step"] == TOTAL
        assert a["hook"]["residual"].count_nonzero() > 0
        assert torch.equal(a["hook"]["residual"], b["hook"]["residual"]), f"rank {rank}: residuals differ"
        assert a["hook"]["sparsifier"] == b["hook"]["sparsifier"], f"rank {rank}: method state differs"


def test_an_image_folder_of_ones_own_trains_with_its_classes(tmp_path):
    """--data-dir: a torchvision ImageFolder (one folder per class) sets the model's classes."""
    from PIL import Image

    generator = torch.Generator().manual_seed(0)
    for label in ("cat", "dog", "owl"):
        (tmp_path / "images" / label).mkdir(parents=True)
        for i in range(8):  # 20x24 pixels: resized and cropped to --image-size
            pixels = torch.randint(0, 256, (20, 24, 3), dtype=torch.uint8, generator=generator)
            Image.fromarray(pixels.numpy()).save(tmp_path / "images" / label / f"{i}.png")
    out = tmp_path / "run"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("WANDB_MODE", "disabled")
        run_world([EXAMPLE, *TINY, "--steps", "2", "--data-dir", str(tmp_path / "images"), "--out", str(out)], processes=2)
    assert [row["step"] for row in rows(out)] == [0, 1]
    assert all(row[keys.DENSITY_ACTUAL] > 0 for row in rows(out))
    state = torch.load(out / "checkpoint.rank0.pt", weights_only=False)
    assert state["model"]["fc.weight"].shape == (3, 512)


@pytest.mark.parametrize("case", ["missing data", "dgc with momentum"])
def test_bad_input_fails_before_any_process_group_with_one_line(tmp_path, case):
    """Exit 2 and one line naming the option and the fix, no traceback, before torch.distributed."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled"}
    args, expected = {
        "missing data": (["--data-dir", str(tmp_path / "nowhere")],
                         f"--data-dir {tmp_path / 'nowhere'} is not a directory: give an ImageFolder, or leave it out for FakeData"),
        "dgc with momentum": (["--sparsifier", "dgc"], "--sparsifier dgc applies momentum itself: pass --momentum 0"),
    }[case]
    result = subprocess.run([sys.executable, EXAMPLE, *args, "--out", str(tmp_path)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"ddp_train.py: error: {expected}"]