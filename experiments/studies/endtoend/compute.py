"""Compute time of a training step: measured on this device, or derived for a GPU profile, and
when each gradient becomes ready in the backward pass (what DDP's buckets overlap with).

`measure_step` builds a study's model and one batch as a rank does and, on this machine:

- counts the FLOPs of one forward+backward (torch.utils.flop_counter.FlopCounterMode) and the aten
  ops it dispatches (each a kernel launch on a GPU);
- times forward and backward (median of repeats), and records for every parameter when its
  gradient was accumulated, in seconds after backward began (a post-accumulate-grad hook).

A compute profile (conf/compute_profile/<gpu>.yaml) turns that into ms per step on a GPU, the
first of these that applies:

1. a number given on the command line (`--compute-ms <study or model>=<ms>`): the user's;
2. a measurement on that GPU of the same model at the same per-worker batch and input shape
   (`measured_ms.<workload>`, written by `python -m experiments.studies.endtoend.measure_compute` on the
   GPU, or imported with its provenance): never carried to another model, batch or input, where
   the time per sample differs (at batch 32 a GPU step is launch-bound: ResNet-110 with 1.7 M
   parameters takes five times ResNet-18's 11.9 ms on an H200);
3. the FLOP fallback, step_ms = max(flops / (peak_tflops * efficiency), kernels * launch_us),
   with the error it makes where both exist stated in docs/endtoend.md (on the H200 it reads
   ResNet-18 at batch 32 at 1.7 ms where 11.9 ms was measured).

The ready times scale with the step: a gradient ready at 30% of the backward here is taken as
ready at 30% of the backward there (the backward's share of the step is this machine's too).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from sparsifiers.common.kernels.selection_model import SelectionModel
from experiments.runformat.errors import ConfigError
from experiments.engine.launcher.environment import REPO_ROOT

PROFILES = REPO_ROOT / "conf" / "compute_profile"


@dataclass(frozen=True)
class StepWork:
    """One forward+backward of a model at a per-worker batch, as counted and timed here."""

    model: str
    batch: int
    flops: float
    kernels: int  # aten ops dispatched by forward+backward: kernel launches on a GPU
    forward_s: float  # median, this machine
    backward_s: float
    ready_s: tuple[float, ...]  # per parameter (layout order): gradient accumulated, s after backward began
    sizes: tuple[int, ...]  # elements per parameter (layout order)
    input_shape: tuple[int, ...] = ()  # one example's (a measured number applies to this input only)

    @property
    def step_s(self) -> float:
        return self.forward_s + self.backward_s

    def describe(self) -> dict[str, Any]:
        return {"model": self.model, "batch": self.batch, "input": list(self.input_shape), "params": sum(self.sizes),
                "gflops": self.flops / 1e9, "kernels": self.kernels,
                "forward_ms": self.forward_s * 1e3, "backward_ms": self.backward_s * 1e3}


@dataclass(frozen=True)
class MeasuredStep:
    """One measured compute time on a profile's GPU and what it was measured on."""

    ms: float
    model: str
    batch: int | None = None  # None: a bare number keyed by model name, which the user declared as the study's
    input: tuple[int, ...] | None = None
    params: int | None = None
    what: str = "forward+backward"

    @classmethod
    def parse(cls, key: str, node: Any) -> "MeasuredStep":
        if not isinstance(node, dict):
            return cls(float(node), key)
        return cls(float(node["ms"]), str(node["model"]), int(node["batch"]), tuple(int(v) for v in node["input"]),
                   int(node["params"]) if node.get("params") is not None else None,
                   str(node.get("what", "forward+backward")))

    def matches(self, work: StepWork) -> bool:
        if self.model != work.model:
            return False
        if self.batch is None:
            return True
        return (self.batch == work.batch and (not work.input_shape or self.input == tuple(work.input_shape))
                and (self.params is None or self.params == sum(work.sizes)))

    def label(self) -> str:
        if self.batch is None:
            return f"{self.model}"
        return f"{self.model} at batch {self.batch}, input {'x'.join(map(str, self.input or ()))}"


@dataclass(frozen=True)
class ComputeProfile:
    """ms per step on one GPU type (module docstring); `measured` profiles use this machine's."""

    name: str
    gpu: str
    peak_tflops: float | None = None
    efficiency: float | None = None
    launch_us: float | None = None
    measured_ms: dict[str, Any] = field(default_factory=dict)  # workload -> MeasuredStep node (or model -> ms)
    memory_bandwidth_gbs: float | None = None
    selection_ms: dict[str, dict[int, float]] = field(default_factory=dict)  # method -> W -> ms, measured here
    selection_at: dict[str, Any] = field(default_factory=dict)  # the layout and density they were measured at
    selection_model: SelectionModel | None = None  # calibrated on this GPU, or borrowed (selection_model.py)
    path: Path | None = None
    bf16: bool | None = None  # the GPU has bf16 (None: the network preset's nodes say, model.runs_on)

    @classmethod
    def load(cls, name: str, directory: Path = PROFILES) -> "ComputeProfile":
        """A profile of `directory` (conf/compute_profile/) by name, a YAML path, or `measured`
        (this machine's own times)."""
        if name == "measured":
            return cls("measured", "this machine")
        path = Path(name) if name.endswith((".yaml", ".yml")) else Path(directory) / f"{name}.yaml"
        if not path.is_file():
            known = ", ".join(["measured", *sorted(p.stem for p in Path(directory).glob("*.yaml"))])
            raise ConfigError(f"compute_profile={name} does not exist: choose one of {known}")
        node = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        assert isinstance(node, dict)
        number = lambda key: float(node[key]) if node.get(key) is not None else None  # noqa: E731
        selection_model = None
        if node.get("selection_model"):
            model = node["selection_model"]
            if isinstance(model, str):  # borrowed: another profile's calibration, scaled to this GPU's memory
                other = cls.load(model, directory)
                selection_model = other.selection_model.on(node["gpu"], number("memory_bandwidth_gbs"),
                                                           other.memory_bandwidth_gbs)
            else:
                selection_model = SelectionModel.from_node(model, node["gpu"])
        return cls(node["name"], node["gpu"], number("peak_tflops"), number("efficiency"), number("launch_us"),
                   dict(node.get("measured_ms") or {}), number("memory_bandwidth_gbs"),
                   {str(m): {int(w): float(ms) for w, ms in row.items()} for m, row in (node.get("selection_ms") or {}).items()},
                   dict(node.get("selection_at") or {}), selection_model, path,
                   bool(node["bf16"]) if node.get("bf16") is not None else None)

    def measurements(self) -> dict[str, MeasuredStep]:
        return {key: MeasuredStep.parse(str(key), value) for key, value in self.measured_ms.items()}

    def step_ms(self, work: StepWork, measured_ms: float, override: float | None = None,
                stands_for: str | None = None) -> tuple[float, str]:
        """The compute ms of one step of `work`'s model and where the number comes from;
        `measured_ms` is this machine's own (used by the `measured` profile), `override` the
        user's (module docstring). `stands_for`: the workload whose measured step a laptop-scale
        study stands for on the GPU (the same model, at the papers' batch and input), used when
        this profile measured it and nothing measured matches the study's own step."""
        if override is not None:
            return override, "given on the command line (--compute-ms)"
        if self.name == "measured":
            return measured_ms, "measured here (median compute ms per rank in the runs)"
        where = f"conf/compute_profile/{self.name}.yaml" if self.path is None or self.path.parent == PROFILES else str(self.path)
        entries = self.measurements()
        for key, entry in entries.items():
            if entry.matches(work):
                return entry.ms, f"measured on {self.gpu}: {key}, {entry.what} ({where})"
        standing = entries.get(stands_for) if stands_for else None
        if standing is not None and standing.model == work.model:
            return standing.ms, (f"measured on {self.gpu}: {stands_for} ({standing.label()}), {standing.what} ({where}); "
                                 f"the step this study stands for: its hosted runs train {work.model} at batch {work.batch}, "
                                 f"input {'x'.join(map(str, work.input_shape or ()))}")
        if not (self.peak_tflops and self.efficiency and self.launch_us is not None):
            raise ConfigError(f"compute_profile={self.name} has no measurement of {work.model} at batch {work.batch} "
                              f"and no peak_tflops, efficiency, launch_us to derive one: measure it "
                              f"(python -m experiments.studies.endtoend.measure_compute) or give --compute-ms")
        flops_ms = work.flops / (self.peak_tflops * 1e12 * self.efficiency) * 1e3
        launch_ms = work.kernels * self.launch_us * 1e-3
        if flops_ms >= launch_ms:
            source = (f"{work.flops / 1e9:.3g} GFLOP / ({self.peak_tflops:g} TFLOPS peak x {self.efficiency:g}) "
                      f"on {self.gpu}")
        else:
            source = f"launch-bound: {work.kernels} kernels x {self.launch_us:g} us on {self.gpu}"
        nearest = [f"{key} ({entry.label()}): {entry.ms:.3g} ms" for key, entry in entries.items() if entry.model == work.model]
        source += (f"; FLOP fallback, {FLOP_FALLBACK_ERROR}"
                   + (f"; not applied here: measured {', '.join(nearest)}, another batch or input" if nearest else ""))
        return max(flops_ms, launch_ms), source


# What the FLOP fallback gets wrong where a measurement exists (docs/endtoend.md, "The compute term").
FLOP_FALLBACK_ERROR = "which reads ResNet-18 at batch 32 on an H200 at 1.73 ms where 11.9 ms was measured (-85%)"


class _CountOps(TorchDispatchMode):
    """Counts the aten ops dispatched inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def measure_step(cfg: DictConfig, repeats: int = 5) -> StepWork:
    """Counts and times one forward+backward of `cfg`'s model on one batch of its data, as a
    rank builds them (module docstring)."""
    # Imported here: building a model needs the rank's builders, the rest of this module does not.
    from experiments.engine.core.tasks import make_task
    from experiments.engine.rank.build import build_dataset, build_model

    torch.manual_seed(cfg.seed)
    data = build_dataset(cfg)
    task = make_task(data)
    model = build_model(cfg, data)
    model.train()
    parameters = [p for p in model.parameters() if p.requires_grad]
    batch = next(iter(task.shard(0, 1, cfg.batch_size, cfg.seed, torch.device("cpu")).epoch(0)))
    state: dict[str, Any] = {}

    def forward_backward() -> None:
        model.zero_grad(set_to_none=True)
        task.loss(model, batch, state).backward()

    with FlopCounterMode(display=False) as flop_counter:
        forward_backward()
    with _CountOps() as ops:
        forward_backward()

    ready: list[float] = [0.0] * len(parameters)
    began = [0.0]
    handles = [p.register_post_accumulate_grad_hook(lambda _, i=i: ready.__setitem__(i, time.perf_counter() - began[0]))
               for i, p in enumerate(parameters)]
    forwards, backwards, readies = [], [], []
    try:
        for _ in range(repeats + 1):  # the first is a warm-up
            model.zero_grad(set_to_none=True)
            start = time.perf_counter()
            loss = task.loss(model, batch, state)
            began[0] = time.perf_counter()
            loss.backward()
            end = time.perf_counter()
            forwards.append(began[0] - start)
            backwards.append(end - began[0])
            readies.append(list(ready))
    finally:
        for handle in handles:
            handle.remove()
    median_ready = tuple(statistics.median(r[i] for r in readies[1:]) for i in range(len(parameters)))
    return StepWork(str(cfg.model.name), int(cfg.batch_size), float(flop_counter.get_total_flops()), ops.count,
                    statistics.median(forwards[1:]), statistics.median(backwards[1:]), median_ready,
                    tuple(p.numel() for p in parameters), example_shape(batch))


def example_shape(batch: Any) -> tuple[int, ...]:
    """One example's input shape: the first tensor of the batch without its batch dimension."""
    first = batch[0] if isinstance(batch, (tuple, list)) else next(iter(batch.values())) if isinstance(batch, dict) else batch
    return tuple(first.shape[1:]) if isinstance(first, torch.Tensor) else ()


def ddp_buckets(work: StepWork, element_bytes: int = 4, cap_mb: float = 25.0, first_cap_mb: float = 1.0) -> list[tuple[float, int]]:
    """DDP's gradient buckets as (ready fraction of the backward, elements), in launch order.

    As DDP after its first iteration: parameters in the order their gradients became ready,
    packed into buckets of at most `cap_mb` (25 MB, DDP's `bucket_cap_mb`), the first at most
    `first_cap_mb` (1 MB, DDP's first-bucket size); a bucket is ready when its last gradient is.
    """
    order = sorted(range(len(work.sizes)), key=lambda i: work.ready_s[i])
    buckets: list[tuple[float, int]] = []
    cap, ready, elements = first_cap_mb, 0.0, 0
    for i in order:
        if elements and (elements + work.sizes[i]) * element_bytes > cap * 2**20:
            buckets.append((ready, elements))
            cap, elements = cap_mb, 0
        elements += work.sizes[i]
        ready = max(ready, work.ready_s[i])
    if elements:
        buckets.append((ready, elements))
    backward = work.backward_s or 1.0
    return [(min(ready / backward, 1.0), elements) for ready, elements in buckets]


def exposed_exchange_s(bucket_ready_s: list[float], bucket_exchange_s: list[float], backward_s: float) -> float:
    """The exchange time left after the backward pass when bucket i's collective starts once it
    is ready and the previous bucket's collective is done (one stream, in order, as DDP issues
    them): max(0, end of the last collective - end of the backward)."""
    clock = 0.0
    for ready, cost in zip(bucket_ready_s, bucket_exchange_s):
        clock = max(clock, ready) + cost
    return max(0.0, clock - backward_s)


def profile_names() -> list[str]:
    return ["measured", *sorted(p.stem for p in Path(PROFILES).glob("*.yaml"))]
