"""Step benchmark: the whole per-step sparsification of every method (accumulate, plan, select,
index exchange, value exchange, scatter, residual), in real gloo processes with one rank per
process and one torch thread each, on a vector shaped like CIFAR ResNet-18's gradients
(N = 11,173,962), density 0.001, error feedback on. Every method runs with both kernel backends
side by side: `torch` (the plain reference path) and `auto` (the compiled fast path where it
applies).

    python -m experiments.studies.benchmarks.step [--workers 2,4] [--methods topk,micro] [--backends torch,auto]
        [--repeats 10] [--settle 20] [--gradients steady|fresh] [--hosted 64,256] [--json results.json]

Processes are started once per W; inside, each rank runs every method and backend in turn. Each
method first runs `--settle` untimed steps (adaptive thresholds settle), then `--repeats` timed
steps. Printed: rank 0's medians per phase and the median of per-step totals (a step's total is
the sum of its phases), each also as a multiple of one copy of N floats, timed in the same
processes between that method's timed steps (every rank at once, after a barrier; the median
over the steps of the median of 3), and |U| / k, the size of what was exchanged.
At W = 2 a target column holds the goals per rank in copies: topk <= 6, deft <= 5, micro, exdyna
and threshold <= 4 (ok/MISSED on the `auto` rows).

Gradients: GRADIENTS_PER_RANK Gaussian tensors per rank, seeded from (rank, i), used in turn,
each step rotated by a new offset (two in-place slice adds: the cost of one add), so that steps
do not repeat. Accumulate is residual += gradient, fused with that rotation: the run's rule
(experiments/engine/core/error_feedback.py) also applies a method's `precondition` (DGC's momentum
correction), which is not applied here. The gradients' sigma and the starting residual follow
`--gradients` (see `gradient_std`): `steady` (the default) starts in the regime error feedback
settles in, so the thresholds start where they end up and |U| is about k; `fresh` puts lambda0 =
1 / (2 sqrt(k)) at the density's quantile of one fresh gradient, which error feedback leaves far
behind within a few steps.

`--hosted 64,256` adds the hosted scale: ONE process hosting W ranks (no process group), a
ResNet-18-sized residual per hosted rank, timing the whole step over all of them. The memory it
needs is estimated first; a W that does not fit is skipped, with the reason. To stay affordable
the hosted ranks share two pregenerated gradients (and one starting residual), each rank adding
them rotated by an offset of its own, so that their selections differ as independent ranks'
would. Its goal: selection (plan + select) of 256 hosted ranks in <= 1 s per step.

`--device cuda` (`make bench MODE=step DEVICE=cuda`): the distributed worlds run one NCCL process
per GPU (a W with fewer GPUs than W is skipped, with the reason), and the hosted world puts all
its ranks on the one GPU, its memory estimated against the GPU's free memory. Every phase is
timed between synchronizations (PhaseClock with the world's synchronize).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from experiments.studies.benchmarks.resnet18_layout import RESNET18_CIFAR_NUMEL, resnet18_cifar_layout
from experiments.engine.core.phases import PHASES
from sparsifiers.common.kernels import set_backend
from sparsifiers.common.layout import Layout
from sparsifiers.registry import chosen

# The benchmark's choice: the methods with goals (TARGET_COPIES_AT_W2), and the hosted-scale ones.
DEFAULT_METHODS = ",".join(chosen("topk", "deft", "micro", "exdyna", "threshold"))
DEFAULT_HOSTED_METHODS = ",".join(chosen("micro", "exdyna", "deft", "topk"))
DEFAULT_BACKENDS = "torch,auto"
REFERENCE_BACKEND = "torch"
FAST_BACKEND = "auto"
GRADIENT_MODELS = ("steady", "fresh")  # see gradient_std
GRADIENTS_PER_RANK = 3
HOSTED_GRADIENTS = 2
COPY_REPEATS = 3  # per timed step
# The goals at W = 2, per rank, as multiples of one copy of N floats.
TARGET_COPIES_AT_W2 = {"topk": 6.0, "deft": 5.0, "micro": 4.0, "exdyna": 4.0, "threshold": 4.0}
# ... and at the hosted scale: selection of 256 hosted ranks in at most 1 s per step.
HOSTED_TARGET_RANKS, HOSTED_TARGET_MS = 256, 1000.0
RANK_TIMEOUT_S = 300  # gloo: a rank left waiting on a dead peer fails after this, never hangs
HOSTED_TIMEOUT_S = 60
MEMORY_HEADROOM_BYTES = 2 * 2**30  # left to the system when deciding whether a hosted W fits
DISCRETE_BOUNDARY_SHIFT = 0.5826  # -zeta(1/2) / sqrt(2 pi), in units of sigma (start_residual)
SCRATCH_VECTORS = 3  # full-size scratch buffers the methods may hold (sparsifiers/common/workspace.py)
RESIDUAL_SEED = 10_000  # + rank: the starting residual's stream, apart from the gradients'
# A step's gradient is a pregenerated one rotated by an offset that changes with the step (and,
# hosted, the rank): reused unrotated, the same few tensors would add up to a drift that grows
# like t instead of sqrt(t), and thresholds would never settle.
STEP_STRIDE = 1_000_003
RANK_STRIDE = 7_919_093
SHORT_PHASE = {"index_exchange": "index_exch", "value_exchange": "value_exch"}


@dataclasses.dataclass
class Run:
    """What one set of processes measures (sent to them as JSON)."""

    workers: int
    methods: list[str]
    backends: list[str]
    density: float = 0.001
    settle: int = 20
    repeats: int = 10
    threads: int = 1
    gradients: str = "steady"
    numel: int | None = None  # None: ResNet-18; a number: a small made-up layout (tests)
    device: str = "cpu"  # cuda: one GPU per process, NCCL (the kernels' torch path runs there)


# -- what every rank measures on --------------------------------------------------------------------
def benchmark_layout(numel: int | None) -> Layout:
    """ResNet-18's layout, or (tests) a small one of `numel` elements in a few unequal tensors,
    so that per-tensor methods (DEFT) still see several units."""
    if numel is None or numel == RESNET18_CIFAR_NUMEL:
        return resnet18_cifar_layout()
    weights = [8, 1, 4, 1, 2, 1, 16, 1]  # conv-like and bias-like tensors
    sizes = [max(1, numel * w // sum(weights)) for w in weights]
    sizes[0] += numel - sum(sizes)
    return Layout.from_shapes((f"tensor{i}", (size,)) for i, size in enumerate(sizes))


def initial_lambda(numel: int, density: float) -> float:
    """lambda0 = 1 / (2 sqrt(k)): where MiCRO, ExDyna and the hard threshold start."""
    from sparsifiers.common.base import target_count
    from sparsifiers.common.threshold_control import initial_threshold

    return initial_threshold(target_count(density, numel))


def gradient_std(numel: int, density: float, model: str) -> float:
    """The gradients' sigma under `model`.

    fresh:  P(|g| >= lambda0) = density for g ~ N(0, sigma^2). True of the first step only: with
            error feedback what is not sent stays, |acc| grows like sqrt(t) sigma, and thresholds
            that move 0.5 % a step fall far behind (|U| ~ 80 k for MiCRO after 20 steps).
    steady: the regime error feedback settles in. A residual that random-walks by sigma a step
            and restarts at 0 when it reaches +-lambda0 crosses at the rate (sigma / lambda0)^2
            (its stationary density is a triangle, see `start_residual`). So sigma =
            lambda0 sqrt(density) sends about density * N a step per rank from the first step
            on. Methods that split the vector (MiCRO, ExDyna) start near, not at, their steady
            state (every rank zeroes the whole union, so a coordinate's W residuals restart
            together) and reach it within about W steps: |U| / k in the table shows where they are.
    """
    lambda0 = initial_lambda(numel, density)
    if model == "fresh":
        return lambda0 / statistics.NormalDist().inv_cdf(1.0 - density / 2.0)
    return lambda0 * math.sqrt(density)


def start_residual(residual: torch.Tensor, scratch: torch.Tensor, density: float, model: str, seed: int) -> None:
    """The residual a method starts from: zeros (fresh), or the steady walk's stationary state
    (steady): the triangle (b - |x|) on [-b, b], drawn as b (U1 - U2) with U1, U2 uniform, whose
    edge b = lambda0 + 0.5826 sigma is where a walk of discrete Gaussian steps behaves as if the
    boundary were (Siegmund's correction, -zeta(1/2) / sqrt(2 pi)); the few draws past lambda0 are
    folded back inside. Without the correction the first steps send half as much. `scratch` is
    overwritten."""
    if model == "fresh":
        residual.zero_()
        return
    lambda0 = initial_lambda(residual.numel(), density)
    edge = lambda0 + DISCRETE_BOUNDARY_SHIFT * gradient_std(residual.numel(), density, model)
    generator = torch.Generator(device=residual.device).manual_seed(seed)
    residual.uniform_(generator=generator)
    residual.sub_(scratch.uniform_(generator=generator)).mul_(edge)
    magnitude = torch.abs(residual, out=scratch)
    beyond = magnitude > lambda0
    residual[beyond] = torch.sign(residual[beyond]) * (2 * lambda0 - magnitude[beyond])


def gaussian_gradient(numel: int, std: float, rank: int, index: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1000 * rank + index)  # one stream per (rank, i)
    return torch.randn(numel, generator=generator).mul_(std)


def rotate_into(destination: torch.Tensor, source: torch.Tensor, shift: int, accumulate: bool) -> None:
    """destination += roll(source, shift) (accumulate) or = roll(source, shift), in place and
    without a rolled copy: two slice operations."""
    numel = source.numel()
    shift %= numel
    for target, part in ((destination[shift:], source[: numel - shift]), (destination[:shift], source[numel - shift:])):
        if accumulate:
            target.add_(part)
        else:
            target.copy_(part)


def build_method(name: str, workers: int, density: float, layout: Layout, rank: int):
    from experiments.engine.rank.build import build_sparsifier
    from experiments.engine.launcher.compose import compose_job

    cfg = compose_job([f"sparsifier={name}", f"workers={workers}", f"sparsifier.density={density}",
                       "dataset=synthetic", "model=mlp"])
    return build_sparsifier(cfg, layout, rank=rank)


def median_copy_ms(source: torch.Tensor, destination: torch.Tensor) -> float:
    synchronize = torch.cuda.synchronize if source.is_cuda else (lambda: None)
    destination.copy_(source)  # untimed: touching fresh pages is no part of a copy
    times = []
    for _ in range(COPY_REPEATS):
        synchronize()
        start = time.perf_counter()
        destination.copy_(source)
        synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


class TimedStep:
    """One benchmark step of the hosted ranks, per phase (ms): every rank's next gradient rotated
    into its residual at its own shift (the accumulate phase), then the hosted step; the step's
    |U| is kept beside its times (`aggregated`). Both worlds run it: one rank per process (shift
    0) and every rank in one process."""

    def __init__(self, ranks, clock, gradients: list[torch.Tensor], shifts: list[int]) -> None:
        self.ranks, self.clock, self.gradients, self.shifts = ranks, clock, gradients, shifts
        self.aggregated: list[int] = []

    def __call__(self, step: int) -> dict[str, float]:
        self.clock.reset()
        self.ranks.world.comm.meter.reset()  # one step's traffic and collectives, as the training loop keeps them
        self.clock.start()
        for residual, shift in zip(self.ranks.residuals, self.shifts):
            rotate_into(residual, self.gradients[step % len(self.gradients)], shift + step * STEP_STRIDE,
                        accumulate=True)
        self.clock.mark("accumulate")
        self.aggregated.append(self.ranks.step(step, clock=self.clock).result.aggregated)
        return {phase: seconds * 1e3 for phase, seconds in self.clock.totals.items()}


def phase_summary(per_step_ms: list[dict[str, float]], aggregated: list[int], k: int) -> dict:
    """Medians per phase, the median of the per-step totals (each the sum of its phases) and of
    |U| / k, with the per-step numbers."""
    phases = list(PHASES) + sorted({p for step in per_step_ms for p in step} - set(PHASES))
    totals = [sum(step.values()) for step in per_step_ms]
    return {
        "phases_ms": {p: statistics.median(step.get(p, 0.0) for step in per_step_ms) for p in phases},
        "total_ms": statistics.median(totals),
        "aggregated_per_k": statistics.median(aggregated) / k,
        "step_phases_ms": per_step_ms,
        "step_totals_ms": totals,
    }


def multiples(summary: dict, copy_ms: float) -> dict:
    return {"total_copies": summary["total_ms"] / copy_ms,
            "phases_copies": {p: ms / copy_ms for p, ms in summary["phases_ms"].items()}}


# -- one rank per process -----------------------------------------------------------------------------
def measure_rank(run: Run) -> list[dict] | None:
    """Runs in each rank's process (WORLD_SIZE, RANK, MASTER_* set by the parent): every method
    with every backend. Returns rank 0's numbers (None elsewhere)."""
    import torch.distributed as dist

    from experiments.engine.core.hosted import HostedRanks
    from experiments.engine.core.phases import PhaseClock
    from experiments.engine.core.world import close_world, init_world

    torch.set_num_threads(run.threads)
    finished = False
    try:
        backend = "nccl" if run.device == "cuda" else "gloo"
        world = init_world(run.workers, run.device, backend, timeout_s=RANK_TIMEOUT_S)
        rank = world.local_ranks[0]
        layout = benchmark_layout(run.numel)
        std = gradient_std(layout.numel, run.density, run.gradients)
        gradients = [gaussian_gradient(layout.numel, std, rank, i).to(world.device) for i in range(GRADIENTS_PER_RANK)]
        out = torch.zeros(layout.numel, device=world.device)
        clock = PhaseClock(world.synchronize)
        results = []
        for name in run.methods:
            for backend in run.backends:
                set_backend(backend)
                ranks = HostedRanks(world, [build_method(name, run.workers, run.density, layout, rank)], out)
                residual = ranks.residuals[0]
                start_residual(residual, out, run.density, run.gradients, RESIDUAL_SEED + rank)
                one_step = TimedStep(ranks, clock, gradients, [0])
                for step in range(run.settle):
                    one_step(step)
                one_step.aggregated.clear()  # |U| of the timed steps only
                # The copy is timed between the timed steps, every rank at once, as every rank
                # sparsifies at once: it meets the same contention for cores and memory bandwidth
                # over the same stretch of time (a copy timed once, before, swung 2x between
                # methods of one run).
                per_step, copies = [], []
                for step in range(run.settle, run.settle + run.repeats):
                    dist.barrier()  # every rank starts the step together
                    per_step.append(one_step(step))
                    dist.barrier()
                    copies.append(median_copy_ms(gradients[0], out))
                copy_ms = statistics.median(copies)
                summary = phase_summary(per_step, one_step.aggregated, ranks.method.k)
                results.append({"method": name, "backend": backend, "workers": run.workers, "copy_ms": copy_ms,
                                **summary, **multiples(summary, copy_ms)})
                del ranks, residual, one_step  # its state goes before the next method's is built
        finished = True
        return results if rank == 0 else None
    finally:
        close_world(wait_for_peers=finished)


# -- one process hosting every rank -------------------------------------------------------------------
def hosted_vectors(ranks: int, model: str) -> int:
    """Full-size float32 vectors a hosted run holds: the residuals, the shared gradients, the
    aggregate, the shared starting residual (steady) and the methods' scratch."""
    return ranks + HOSTED_GRADIENTS + 1 + (model != "fresh") + SCRATCH_VECTORS


def available_memory_bytes(device: str = "cpu") -> int | None:
    """Free memory where the hosted ranks' vectors live: the GPU's on CUDA, MemAvailable else."""
    if device == "cuda":
        return torch.cuda.mem_get_info()[0]
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def measure_hosted(run: Run) -> list[dict]:
    """Runs in a process of its own with no WORLD_SIZE: init_world hosts all W ranks here."""
    from experiments.engine.core.hosted import HostedRanks
    from experiments.engine.core.phases import PhaseClock
    from experiments.engine.core.world import close_world, init_world

    torch.set_num_threads(run.threads)
    try:
        world = init_world(run.workers, run.device, "nccl" if run.device == "cuda" else "gloo",
                           timeout_s=HOSTED_TIMEOUT_S)
        device = world.device
        layout = benchmark_layout(run.numel)
        std = gradient_std(layout.numel, run.density, run.gradients)
        gradients = [gaussian_gradient(layout.numel, std, 0, i).to(device) for i in range(HOSTED_GRADIENTS)]
        out = torch.zeros(layout.numel, device=device)
        start = torch.zeros(layout.numel, device=device)  # the shared starting residual (zeros: fresh)
        start_residual(start, out, run.density, run.gradients, RESIDUAL_SEED)
        rank_shifts = [rank * RANK_STRIDE for rank in world.local_ranks]
        clock = PhaseClock(world.synchronize)
        results = []
        for name in run.methods:
            for backend in run.backends:
                set_backend(backend)
                ranks = HostedRanks(world, [build_method(name, run.workers, run.density, layout, rank)
                                            for rank in world.local_ranks], out)
                for residual, shift in zip(ranks.residuals, rank_shifts):
                    rotate_into(residual, start, shift, accumulate=False)
                one_step = TimedStep(ranks, clock, gradients, rank_shifts)
                for step in range(run.settle):
                    one_step(step)
                one_step.aggregated.clear()  # |U| of the timed steps only
                per_step = [one_step(step) for step in range(run.settle, run.settle + run.repeats)]
                # DEFT's leader plans before anyone selects: selection is plan + select.
                selection_ms = statistics.median(s.get("plan", 0.0) + s.get("select", 0.0) for s in per_step)
                results.append({"method": name, "backend": backend, "workers": run.workers,
                                "selection_ms": selection_ms, **phase_summary(per_step, one_step.aggregated, ranks.method.k)})
                del ranks, one_step  # their state and residuals go before the next method's are built
        return results
    finally:
        close_world()


# -- the parent: start the processes, collect ----------------------------------------------------------
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def child_environment(threads: int, **extra: str) -> dict[str, str]:
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    # One core per rank: the compiled kernels get as many threads as torch.
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        environment[key] = str(threads)
    return {**environment, **extra}


def run_children(mode: str, run: Run, environments: list[dict[str, str]]) -> list[dict]:
    """Starts one child per environment, all measuring `run`; returns what the first one wrote.
    A child that fails stops the others, and its output is raised with the error (a rank left
    waiting on a dead peer would otherwise hang until the gloo timeout)."""
    with tempfile.TemporaryDirectory(prefix="step-bench-") as folder:
        result_path = Path(folder, "result.json")
        spec = json.dumps({"mode": mode, "result_path": str(result_path), "run": dataclasses.asdict(run)})
        logs = [Path(folder, f"child{i}.log") for i in range(len(environments))]
        children: list[subprocess.Popen] = []
        try:
            for environment, log in zip(environments, logs):
                with open(log, "w") as sink:
                    children.append(subprocess.Popen(
                        [sys.executable, "-m", "experiments.studies.benchmarks.step", "--child", spec],
                        env=environment, stdout=sink, stderr=subprocess.STDOUT))
            failed = None
            while failed is None and any(child.poll() is None for child in children):
                time.sleep(0.2)
                failed = next((i for i, child in enumerate(children) if child.returncode not in (None, 0)), None)
            failed = next((i for i, child in enumerate(children) if child.returncode not in (None, 0)), failed)
            if failed is not None:
                tail = "\n".join(logs[failed].read_text().splitlines()[-40:])
                raise RuntimeError(f"benchmark process {failed} of {len(children)} ({mode}, W = {run.workers}) "
                                   f"exited with {children[failed].returncode}:\n{tail}")
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.wait()
        return json.loads(result_path.read_text())


def run_distributed(run: Run) -> list[dict]:
    """W processes, one rank each, joined by gloo; rank 0's results per method and backend."""
    port = str(free_port())
    environments = [child_environment(run.threads, WORLD_SIZE=str(run.workers), RANK=str(rank), LOCAL_RANK=str(rank),
                                      MASTER_ADDR="127.0.0.1", MASTER_PORT=port) for rank in range(run.workers)]
    return run_children("distributed", run, environments)


def run_hosted(run: Run) -> list[dict]:
    """One process hosting all W ranks; its results per method and backend."""
    return run_children("hosted", run, [child_environment(run.threads)])


def child_main(spec_json: str) -> None:
    spec = json.loads(spec_json)
    run = Run(**spec["run"])
    result = measure_hosted(run) if spec["mode"] == "hosted" else measure_rank(run)
    if result is not None:
        Path(spec["result_path"]).write_text(json.dumps(result))


# -- printing -------------------------------------------------------------------------------------------
def target_cell(row: dict) -> str:
    target = TARGET_COPIES_AT_W2.get(row["method"])
    if target is None:
        return "-"
    if row["backend"] != FAST_BACKEND:
        return f"<= {target:g}x"
    return f"<= {target:g}x " + ("ok" if row["total_copies"] <= target else "MISSED")


def print_distributed(workers: int, rows: list[dict], device: str = "cpu") -> None:
    """Two lines per method and backend: milliseconds, then the same as multiples of the copy."""
    phases = list(rows[0]["phases_ms"])
    with_target = workers == 2
    processes = "NCCL processes, one rank and one GPU" if device == "cuda" else "gloo processes, one rank"
    print(f"\nW = {workers}: {workers} {processes} each; rank 0's medians in ms, second line in "
          f"copies of N floats (that method's copy ms); |U|/k: coordinates exchanged / k")
    header = (f"{'method':<10}{'backend':<9}{'|U|/k':>7}{'copy ms':>8}{'total':>9}"
              + "".join(f"{SHORT_PHASE.get(p, p):>12}" for p in phases) + ("  target (W=2)" if with_target else ""))
    print(header)
    print("-" * len(header))
    for row in rows:
        print(f"{row['method']:<10}{row['backend']:<9}{row['aggregated_per_k']:>7.2f}{row['copy_ms']:>8.3f}"
              f"{row['total_ms']:>9.2f}" + "".join(f"{row['phases_ms'][p]:>12.2f}" for p in phases))
        print(f"{'':<26}{'x copy':>8}{row['total_copies']:>8.2f}x"
              + "".join(f"{row['phases_copies'][p]:>11.2f}x" for p in phases)
              + (f"  {target_cell(row)}" if with_target else ""))


def print_hosted(workers: int, rows: list[dict]) -> None:
    phases = list(rows[0]["phases_ms"])
    print(f"\nHosted: one process hosting W = {workers} ranks; medians per step over all hosted ranks in ms "
          f"(selection = plan + select; goal <= {HOSTED_TARGET_MS:g} ms at W = {HOSTED_TARGET_RANKS})")
    header = (f"{'method':<10}{'backend':<9}{'|U|/k':>7}{'selection':>10}{'total':>10}"
              + "".join(f"{SHORT_PHASE.get(p, p):>12}" for p in phases) + "  goal")
    print(header)
    print("-" * len(header))
    for row in rows:
        verdict = ""
        if workers == HOSTED_TARGET_RANKS and row["backend"] == FAST_BACKEND:
            verdict = " ok" if row["selection_ms"] <= HOSTED_TARGET_MS else " MISSED"
        print(f"{row['method']:<10}{row['backend']:<9}{row['aggregated_per_k']:>7.2f}"
              f"{row['selection_ms']:>10.1f}{row['total_ms']:>10.1f}"
              + "".join(f"{row['phases_ms'][p]:>12.1f}" for p in phases)
              + f"  <= {HOSTED_TARGET_MS:g} ms @ W={HOSTED_TARGET_RANKS}{verdict}")


def distributed_skip(workers: int, device: str, gpus: int) -> str | None:
    """Why a distributed W cannot run here (one GPU per NCCL process), None if it can."""
    if device == "cuda" and gpus < workers:
        return f"W = {workers} on CUDA needs {workers} GPUs (one per NCCL process), {gpus} here"
    return None


def comma_list(text: str) -> list[str]:
    return [item for item in text.split(",") if item]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="2,4", help="W values, one gloo process per rank")
    parser.add_argument("--methods", default=DEFAULT_METHODS, help="any of conf/sparsifier/, dense included")
    parser.add_argument("--backends", default=DEFAULT_BACKENDS, help="kernel backends: torch, auto, compiled")
    parser.add_argument("--density", type=float, default=0.001)
    parser.add_argument("--settle", type=int, default=20, help="untimed steps first (thresholds settle)")
    parser.add_argument("--repeats", type=int, default=10, help="timed steps")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank (1: one core per rank)")
    parser.add_argument("--gradients", choices=GRADIENT_MODELS, default="steady", help="see gradient_std")
    parser.add_argument("--hosted", default="", help="hosted W values, e.g. 64,256 (default: none)")
    parser.add_argument("--hosted-methods", default=DEFAULT_HOSTED_METHODS)
    parser.add_argument("--hosted-settle", type=int, default=3)
    parser.add_argument("--hosted-repeats", type=int, default=3)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: one GPU per process and NCCL (W GPUs for W workers)")
    parser.add_argument("--json", type=Path, default=None, help="write every number here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child_main(args.child)
        return
    from experiments.studies.benchmarks.select import device_problem

    problem = device_problem(args.device, torch.cuda.is_available())
    if problem:
        print(problem, file=sys.stderr)
        sys.exit(2)
    gpus = torch.cuda.device_count() if args.device == "cuda" else 0

    backends = comma_list(args.backends)
    workers = [int(w) for w in comma_list(args.workers)]
    hosted = [int(w) for w in comma_list(args.hosted)]
    common = dict(backends=backends, density=args.density, threads=args.threads, gradients=args.gradients)
    numel = RESNET18_CIFAR_NUMEL
    print(f"N = {numel:,} (CIFAR ResNet-18), density {args.density} (k = {int(args.density * numel):,}), "
          f"error feedback on, {args.gradients} gradients, W = {','.join(map(str, workers))}, "
          f"{args.threads} thread(s) per rank, backends {','.join(backends)}, "
          f"median of {args.repeats} steps after {args.settle} untimed, device {args.device}")
    report = {"numel": numel, "density": args.density, "threads": args.threads, "gradients": args.gradients,
              "device": args.device,
              "settle": args.settle, "repeats": args.repeats, "backends": backends,
              "distributed": [], "hosted": [], "hosted_skipped": []}
    try:
        for w in workers:
            skip = distributed_skip(w, args.device, gpus)
            if skip:
                print(f"\nW = {w}: skipped: {skip}")
                report.setdefault("distributed_skipped", []).append({"workers": w, "reason": skip})
                continue
            rows = run_distributed(Run(w, comma_list(args.methods), settle=args.settle, repeats=args.repeats,
                                       device=args.device, **common))
            print_distributed(w, rows, args.device)
            report["distributed"].extend(rows)
        for w in hosted:
            vectors = hosted_vectors(w, args.gradients)
            needed, available = vectors * numel * 4, available_memory_bytes(args.device)
            budget = None if available is None else available - MEMORY_HEADROOM_BYTES
            print(f"\nHosted W = {w}: estimated memory {needed / 2**30:.1f} GiB ({vectors} vectors of N floats: "
                  f"residuals, shared gradients, aggregate, scratch)"
                  + ("" if available is None else f"; available {available / 2**30:.1f} GiB, 2 GiB kept free"))
            if budget is not None and needed > budget:
                reason = f"needs {needed / 2**30:.1f} GiB, only {budget / 2**30:.1f} GiB to spare"
                print(f"skipped: {reason}")
                report["hosted_skipped"].append({"workers": w, "reason": reason})
                continue
            rows = run_hosted(Run(w, comma_list(args.hosted_methods), settle=args.hosted_settle,
                                  repeats=args.hosted_repeats, device=args.device, **common))
            print_hosted(w, rows)
            report["hosted"].extend(rows)
    except RuntimeError as error:
        sys.exit(f"step benchmark failed: {error}")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
