"""Times the compute of a training step on this machine's GPU and writes it into its compute
profile, where `make endtoend` takes it before any FLOP estimate (compute.py).

    python -m experiments.studies.endtoend.measure_compute --profile h200 [--device cuda]
        [--workloads resnet18_cifar10,vgg19_cifar100] [--studies quickstart,resnet18]
        [--repeats 20] [--warmup 5] [--profiles-dir conf/compute_profile] [--override dataset=digits]

Each workload (conf/workload/) or end-to-end study (its model and batch) is built
as a rank builds it, moved to the device with one batch of its data, and timed: forward,
backward and the optimizer's step, each between device synchronizations, `--warmup` untimed
steps first, then the median of `--repeats`. The entry it writes under `measured_ms`, keyed by
the workload or study name, records the model, the per-worker batch, one example's input shape
and the parameter count: the model uses the time only for a step of that model at that batch and
input (never carried to another). `ms` is forward + backward + optimizer step.

The file keeps everything above its `# --- measured` line as it was (the hand-written fields
and their comments); below it, `measured_env` (GPU, torch, date) and `measured_ms` are rewritten,
entries of workloads not measured this time kept. A profile that does not exist is created with
the GPU's name and no FLOP fallback.
"""
from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

import torch
import yaml

from experiments.studies.endtoend.compute import PROFILES, example_shape

MARKER = "# --- measured: written by python -m experiments.studies.endtoend.measure_compute; below this line is replaced on each run"


def time_step(cfg, device: torch.device, repeats: int, warmup: int) -> dict[str, Any]:
    """Median forward, backward and optimizer-step ms of `cfg`'s model on one batch, on `device`."""
    from experiments.engine.core.tasks import make_task
    from experiments.engine.rank.build import build_dataset, build_model, build_optimizer

    torch.manual_seed(cfg.seed)
    data = build_dataset(cfg)
    task = make_task(data)
    model = build_model(cfg, data).to(device)
    model.train()
    optimizer = build_optimizer(cfg, model, types.SimpleNamespace(owns_momentum=False))
    batch = next(iter(task.shard(0, 1, cfg.batch_size, cfg.seed, device).epoch(0)))
    state: dict[str, Any] = {}
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    parts: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": []}
    for i in range(warmup + repeats):
        optimizer.zero_grad(set_to_none=False)
        sync()
        t0 = time.perf_counter()
        loss = task.loss(model, batch, state)
        sync()
        t1 = time.perf_counter()
        loss.backward()
        sync()
        t2 = time.perf_counter()
        optimizer.step()
        sync()
        t3 = time.perf_counter()
        if i >= warmup:
            for key, (a, b) in zip(parts, ((t0, t1), (t1, t2), (t2, t3))):
                parts[key].append((b - a) * 1e3)
    medians = {key: statistics.median(values) for key, values in parts.items()}
    return {"ms": round(sum(medians.values()), 4), "model": str(cfg.model.name), "batch": int(cfg.batch_size),
            "input": list(example_shape(batch)), "params": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "what": f"forward+backward+optimizer.step, median of {repeats} after {warmup} warm-up",
            "parts_ms": {key: round(value, 4) for key, value in medians.items()}}


def write_profile(path: Path, entries: dict[str, dict], env: dict[str, Any]) -> None:
    """Rewrites what follows the marker of `path` (module docstring), merging `entries` into the
    entries already there."""
    text = path.read_text() if path.is_file() else ""
    head, found, tail = text.partition(MARKER)
    old = (yaml.safe_load(tail) or {}) if found else {}
    if not text:
        head = (f"# {env['gpu']}: measured by python -m experiments.studies.endtoend.measure_compute (no FLOP fallback:\n"
                f"# add peak_tflops, efficiency, launch_us to derive unmeasured models).\n"
                f"name: {path.stem}\ngpu: {env['gpu']}\n")
    elif not found:
        old = {"measured_ms": (yaml.safe_load(text) or {}).get("measured_ms") or {}}
        head = "".join(line + "\n" for line in text.splitlines() if not line.startswith("measured_ms:"))
    merged = {**(old.get("measured_ms") or {}), **entries}
    body = yaml.safe_dump({"measured_env": env, "measured_ms": merged}, sort_keys=False, default_flow_style=None, width=110)
    path.write_text(head.rstrip("\n") + "\n" + MARKER + "\n" + body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.studies.endtoend.measure_compute", description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", required=True, help="the profile to write: conf/compute_profile/<profile>.yaml")
    parser.add_argument("--device", default="cuda", help="cuda (the GPU this profile describes) or cpu (tests)")
    parser.add_argument("--workloads", default="resnet18_cifar10", help="comma list of conf/workload/ names")
    parser.add_argument("--studies", default="", help="comma list of end-to-end studies (quickstart, resnet18)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--profiles-dir", type=Path, default=PROFILES)
    parser.add_argument("--override", action="append", default=[], help="an extra config override for every job")
    options = parser.parse_args(argv)
    device = torch.device(options.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("measure_compute: --device cuda but torch sees no GPU here: run it on the GPU the profile describes "
              "(or --device cpu to try it)", file=sys.stderr)
        return 2

    from omegaconf import open_dict

    from experiments.studies.endtoend.studies import STUDIES
    from experiments.engine.launcher.compose import compose_job

    jobs: dict[str, list[str]] = {w: [f"workload={w}"] for w in options.workloads.split(",") if w}
    for name in (s for s in options.studies.split(",") if s):
        if name not in STUDIES:
            print(f"measure_compute: --studies {name}: choose from {', '.join(STUDIES)}", file=sys.stderr)
            return 2
        jobs[name] = [f"experiment={STUDIES[name].experiment}"]  # the study's model, data and per-worker batch
    entries = {}
    for name, overrides in jobs.items():
        cfg = compose_job([*overrides, *options.override])
        with open_dict(cfg):
            del cfg["hydra"]
        entries[name] = time_step(cfg, device, options.repeats, options.warmup)
        print(f"{name}: {entries[name]['ms']:.4g} ms ({entries[name]['parts_ms']})", flush=True)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    env = {"gpu": gpu, "torch": str(torch.__version__), "date": datetime.date.today().isoformat(), "device": str(device)}
    options.profiles_dir.mkdir(parents=True, exist_ok=True)
    path = options.profiles_dir / f"{options.profile}.yaml"
    write_profile(path, entries, env)
    print(f"measure_compute: wrote {len(entries)} entries to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
