"""`make calibrate` (python -m experiments.studies.calibrate): time this machine's collectives, fit the
network model, write the fitted model as `network` presets and print measured beside fitted.

The rule (docs/network.md, "Calibration"): one link (alpha, beta) per collective AND per W, fitted
on sizes >= 64 KB. Gloo on one host is not one network: W processes share the host's cores, so
once W exceeds them the per-message cost grows with W (fitted on 2 cores: alpha ~0.3 ms at W=2,
~1.1 ms at W=4, ~2.2 ms at W=8), and each gloo collective has its own algorithm and overhead. One
(alpha, beta) for every W and collective misses by a median of ~57% there; per (collective, W) ~21%.
A preset holds one link, so one preset is written per W: its link is that W's all-reduce fit (the
dense baseline and the largest collective of most exchanges), the other fits are its comments.

On GPUs (NCCL, one process per GPU, one node) the fitted link is the intra-node one; the inter-node
link cannot be measured from one node and stays a nominal placeholder, said so in the file.
"""
from __future__ import annotations

import argparse
import datetime
import os
import socket
import sys
from pathlib import Path

import torch

from experiments.studies.calibrate.fit import Fit, fit_link, median_error, model_time
from experiments.studies.calibrate.measure import OPS, Sample, measure
from experiments.engine.core.network import NetworkModel

MIN_FIT_BYTES = 64 * 1024  # below this a host's timings are scheduling noise, not a link
UNITS = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3}
# The inter-node placeholder of a one-node GPU calibration: a nominal 100 Gbit/s EDR InfiniBand.
PLACEHOLDER_INTER = (2.0, 100.0)


def parse_bytes(text: str) -> int:
    text = text.strip().upper()
    for unit in sorted(UNITS, key=len, reverse=True):
        if text.endswith(unit) and text[: -len(unit)].replace(".", "", 1).isdigit():
            return int(float(text[: -len(unit)]) * UNITS[unit])
    if text.isdigit():
        return int(text)
    raise argparse.ArgumentTypeError(f"a size like 64MB, 256KB or 4096, got {text!r}")


def sizes_up_to(max_bytes: int, step: int = 4) -> list[int]:
    """4 B, 16 B, ... (powers of `step`) up to max_bytes."""
    sizes, n = [], 4
    while n <= max_bytes:
        sizes.append(n)
        n *= step
    return sizes


def model_of_factory(gpus: int, name: str):
    """The cluster whose link is fitted: on CPUs every process its own node, the inter link
    (loopback TCP); on one node of GPUs the intra link (inter: a placeholder, never used)."""
    if gpus == 0:
        return lambda alpha_s, bytes_per_s: NetworkModel(name, alpha_s * 1e6, bytes_per_s * 8 / 1e9, algorithm="ring")
    return lambda alpha_s, bytes_per_s: NetworkModel(name, *PLACEHOLDER_INTER, gpus_per_node=gpus,
                                                     intra_latency_us=alpha_s * 1e6,
                                                     intra_bandwidth_gbit=bytes_per_s * 8 / 1e9, algorithm="ring")


def preset_yaml(name: str, world_size: int, fits: dict[str, Fit], errors: dict[str, float], gpus: int, note: str) -> str:
    ar = fits["all_reduce"]
    lines = [f"# Calibrated by `make calibrate` on {socket.gethostname()}, {note}, W={world_size}.",
             f"# Fitted on sizes >= {MIN_FIT_BYTES // 1024} KB (docs/network.md, Calibration): one link per collective;",
             "# this preset's link is the all-reduce fit; the others, for reference:"]
    for op, fit in fits.items():
        lines.append(f"#   {op:10s} latency_us={fit.latency_us:.1f} bandwidth_gbit={fit.bandwidth_gbit:.3f} "
                     f"(median relative error {errors[op]:.0%})")
    lines.append(f"name: {name}")
    if gpus == 0:
        lines += [f"latency_us: {ar.latency_us:.3f}  # fitted alpha: gloo all-reduce at W={world_size} over loopback",
                  f"bandwidth_gbit: {ar.bandwidth_gbit:.4f}  # fitted beta: the same fit",
                  "gpus_per_node: 1  # every process its own endpoint: gloo talks TCP even on one host",
                  "intra_latency_us: null  # no intra-node link in this model",
                  "intra_bandwidth_gbit: null  # no intra-node link in this model"]
    else:
        lines += [f"latency_us: {PLACEHOLDER_INTER[0]}  # NOT MEASURED (one node): nominal EDR InfiniBand placeholder",
                  f"bandwidth_gbit: {PLACEHOLDER_INTER[1]}  # NOT MEASURED (one node): run across nodes to fit it",
                  f"gpus_per_node: {gpus}  # the GPUs of this node",
                  f"intra_latency_us: {ar.latency_us:.3f}  # fitted alpha: NCCL all-reduce at W={world_size}",
                  f"intra_bandwidth_gbit: {ar.bandwidth_gbit:.4f}  # fitted beta: the same fit"]
    lines.append("algorithm: ring  # the algorithm the fit assumed")
    return "\n".join(lines) + "\n"


def human(nbytes: int) -> str:
    for unit in ("GB", "MB", "KB"):
        if nbytes >= UNITS[unit]:
            return f"{nbytes / UNITS[unit]:g} {unit}"
    return f"{nbytes} B"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make calibrate", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="2,4,8", help="process counts W, comma-separated (default 2,4,8)")
    parser.add_argument("--max-bytes", type=parse_bytes, default=parse_bytes("64MB"), help="largest size (default 64MB)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per point, at most (default 5)")
    parser.add_argument("--quick", action="store_true", help="W=2, up to 4 MB, 2 repeats: a smoke run (~20 s)")
    parser.add_argument("--out", type=Path, default=Path("outputs/calibration"),
                        help="presets go to OUT/network/ (a Hydra search path's config group)")
    parser.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto")
    args = parser.parse_args(argv)
    workers = [int(w) for w in args.workers.split(",")]
    if args.quick:
        workers, args.max_bytes, args.repeats = [2], min(args.max_bytes, 4 * UNITS["MB"]), 2
    gpus = torch.cuda.device_count() if args.backend in ("auto", "nccl") else 0
    if gpus == 1:  # one GPU: no link between GPUs to measure
        print("note: one GPU only: nothing to time between GPUs; calibrating gloo on the CPU", file=sys.stderr)
        gpus = 0 if args.backend == "auto" else gpus
    backend = "nccl" if gpus else "gloo"
    if args.backend == "nccl" and gpus < 2:
        print("error: --backend nccl needs at least 2 GPUs on this node", file=sys.stderr)
        return 2
    if gpus:
        too_many = [w for w in workers if w > gpus]
        if too_many:
            print(f"note: W={too_many} skipped: one process per GPU and {gpus} GPUs here", file=sys.stderr)
        workers = [w for w in workers if w <= gpus] or [gpus]
    cores = os.cpu_count() or 1
    note = f"{backend}, {gpus} GPUs" if gpus else f"gloo on {cores} cores"
    host = socket.gethostname().split(".")[0].replace("-", "_")
    model_of = model_of_factory(gpus, host)
    sizes = sizes_up_to(args.max_bytes)
    print(f"calibrating {note}: W={workers}, {len(sizes)} sizes {human(sizes[0])}..{human(sizes[-1])}, "
          f"up to {args.repeats} repeats", flush=True)
    (args.out / "network").mkdir(parents=True, exist_ok=True)
    rows, worst = [], []
    for world_size in workers:
        samples = measure(world_size, sizes, args.repeats, backend=backend)
        fits, errors = {}, {}
        for op in OPS:
            mine = [s for s in samples if s.op == op]
            fits[op] = fit_link(mine, model_of, MIN_FIT_BYTES)
            errors[op] = median_error(mine, model_of(fits[op].alpha_s, fits[op].bytes_per_s), MIN_FIT_BYTES)
            rows += [(s, model_time(model_of(fits[op].alpha_s, fits[op].bytes_per_s), op, world_size, s.nbytes)) for s in mine]
        worst.append(max(errors.values()))
        name = f"{host}_w{world_size}"
        path = args.out / "network" / f"{name}.yaml"
        path.write_text(preset_yaml(name, world_size, fits, errors, gpus, note))
        print(f"W={world_size}: wrote {path}", flush=True)
    print_table(rows)
    big = [abs(fitted - s.seconds) / s.seconds for s, fitted in rows if s.nbytes >= MIN_FIT_BYTES]
    overall = sorted(big)[len(big) // 2] if big else float("nan")
    print(f"\nmedian relative error over sizes >= 64 KB: {overall:.1%} (worst collective and W: {max(worst):.1%})")
    example = args.out / "network" / f"{host}_w{workers[-1]}.yaml"
    print(f"use a preset (workers=W with the preset of that W): python run.py "
          f"'hydra.searchpath=[file://{args.out.resolve()}]' network={example.stem} ...\n"
          f"  or copy it to conf/network/; from Python: NetworkModel.preset('{example}')")
    return 0


def print_table(rows: list[tuple[Sample, float]]) -> None:
    print(f"\n{'collective':10s} {'W':>2s} {'size':>9s} {'measured ms':>12s} {'fitted ms':>10s} {'error':>7s}")
    for s, fitted in rows:
        error = (fitted - s.seconds) / s.seconds
        print(f"{s.op:10s} {s.world_size:2d} {human(s.nbytes):>9s} {s.seconds * 1e3:12.3f} {fitted * 1e3:10.3f} {error:+7.1%}")


if __name__ == "__main__":
    sys.exit(main())
