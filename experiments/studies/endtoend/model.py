"""The modelled step, per method, worker count and network: the first factor of whether a
sparsifier pays (breakeven.py divides the best dense baseline's by it).

    step_ms(W) = compute_ms + selection_ms(W) + exchange_ms(W) - overlapped_ms(W)

- compute_ms: one rank's forward+backward, measured here or from a compute profile
  (experiments/studies/endtoend/compute.py);
- selection_ms(W): under the `measured` profile, measured with hosted ranks here, fitted beyond
  them (extrapolate.py); under a GPU profile, the first that applies (selection.py): the user's
  (`--select-ms <method>=<ms>`); measured on that GPU (the profile's `selection_ms`, for a study of
  the measured layout's size); modelled as ops x launch + bytes / bandwidth from the ops counted at
  the study's layout, calibrated on a measured GPU; else (nothing counted) the hosted time scaled
  as the compute is, said so in the sources;
- exchange_ms(W): the cluster model's price of the method's ledger at W (ledger.py);
- overlapped_ms(W): for the DDP-style baselines (the dense fp32 all-reduce with overlap, the
  bf16/fp16 hooks and PowerSGD, which DDP runs bucket by bucket), the part of the exchange
  hidden behind the backward pass: each bucket's share of the ledger starts once its gradients
  are ready (measured ready times) and the previous bucket's collectives are done. Methods that
  select over the whole gradient cannot start before the backward ends: nothing overlaps.

The steps to the target are not the step's: they are the second factor (steps_ratio.py).
"""
from __future__ import annotations

import math

from dataclasses import dataclass, field

from experiments.engine.core.network import NetworkModel
from experiments.engine.core.ledger import Collective
from experiments.studies.endtoend.compute import ComputeProfile, StepWork, ddp_buckets, exposed_exchange_s
from experiments.studies.endtoend.extrapolate import Statistics
from experiments.studies.endtoend.ledger import at_workers, sent_bytes_max
from experiments.studies.endtoend.runs import RunStats
from experiments.studies.endtoend.selection import SAME_LAYOUT, log_interpolate
from sparsifiers.common.kernels.selection_model import SelectCost
from sparsifiers.registry import names

# The dense baselines: the sparsifiers are compared with the fastest of them.
DENSE_BASELINES = names(dense_baseline=True)
NEEDS_BF16 = names(needs_bf16=True)  # not modelled on a network whose GPUs lack bf16 (network.bf16 false: V100)


def runs_on(method: str, network: NetworkModel, profile: ComputeProfile | None = None) -> bool:
    """Whether the study models `method` on `network`: a bf16 baseline only where the GPUs have
    bf16 (a V100 has none, so there fp16, `dense_fp16`, is the 16-bit baseline). The modelled
    GPU's profile says so where it does (`bf16`), else the network preset's nodes."""
    bf16 = profile.bf16 if profile is not None and profile.bf16 is not None else network.bf16
    return bf16 or method not in NEEDS_BF16


@dataclass(frozen=True)
class Method:
    """One method of a study: its first hosted run, its template ledger and its fitted statistics."""

    name: str
    first: RunStats  # a run at its smallest hosted W (its compute time)
    template: RunStats  # the largest hosted W: its ledger is the template
    statistics: Statistics
    overlap: bool  # DDP-style: its exchange runs bucket by bucket, overlapping the backward

    @property
    def dense(self) -> bool:
        return self.name in DENSE_BASELINES


@dataclass(frozen=True)
class Point:
    """One method at one W on one network."""

    method: str
    workers: int
    network: str
    compute_ms: float
    select_ms: float
    exchange_ms: float
    overlapped_ms: float
    sent_bytes: float  # the busiest rank, per step
    union: float
    k_max: float
    hosted: bool  # the statistics were measured at this W (not extrapolated)

    @property
    def step_ms(self) -> float:
        return self.compute_ms + self.select_ms + self.exchange_ms - self.overlapped_ms


@dataclass
class Study:
    """Everything one study's model needs, and the sources of its modelled numbers."""

    name: str
    work: StepWork
    measured_compute_ms: float  # one rank's forward+backward here (median over the study's runs)
    profile: ComputeProfile
    methods: dict[str, Method] = field(default_factory=dict)
    compute_override: float | None = None  # --compute-ms: the user's compute ms on the modelled GPU
    select_override: dict[str, float] = field(default_factory=dict)  # --select-ms: method -> ms at every W
    select_costs: dict[str, dict[int, SelectCost]] = field(default_factory=dict)  # counted at the study's layout
    density: float | None = None  # the sparsifiers' density in the study's runs
    stands_for: str | None = None  # the measured workload whose GPU step the study's stands for (studies.py)
    # The robustness check's moves (robustness.py): compute and selection scaled on every point.
    compute_scale: float = 1.0
    select_scale: float = 1.0

    def compute_ms(self) -> tuple[float, str]:
        return self.profile.step_ms(self.work, self.measured_compute_ms, self.compute_override, self.stands_for)

    def select_ms(self, method: str, workers: int, hosted_ms: float) -> tuple[float, str]:
        """One rank's selection ms of `method` at `workers` on the modelled GPU, and its source
        (module docstring); `hosted_ms` is the hosted runs' (fitted) time here."""
        if method in self.select_override:
            return self.select_override[method], "given on the command line (--select-ms)"
        if self.profile.name == "measured":
            return hosted_ms, "measured with hosted ranks here, fitted beyond"
        table = self.measured_selection(method)
        if table:
            at = self.profile.selection_at
            return log_interpolate(table, workers), (f"measured on {self.profile.gpu} at W = {min(table)}-{max(table)} "
                                                     f"(N = {int(at['numel']):,}, d = {at['density']}), held beyond")
        costs, model = self.select_costs.get(method), self.profile.selection_model
        if costs and model is not None:
            cost = SelectCost(round(log_interpolate({w: c.ops for w, c in costs.items()}, workers)),
                              log_interpolate({w: c.bytes for w, c in costs.items()}, workers),
                              log_interpolate({w: c.ranked for w, c in costs.items()}, workers))
            why = self.unmeasured_because(method)
            return model.ms(cost), (f"modelled{f' ({why})' if why else ''}: {model.describe()}, ops counted "
                                    f"here at N = {sum(self.work.sizes):,}, W = {', '.join(map(str, sorted(costs)))}")
        compute_ms, _ = self.compute_ms()
        scale = compute_ms / self.measured_compute_ms
        return hosted_ms * scale, f"hosted time here scaled by {scale:.3g} (the compute's ratio): nothing counted"

    def measured_selection(self, method: str) -> dict[int, float] | None:
        """The profile's measured selection of `method` (W -> ms) when it applies to this study:
        measured at this layout (N within 1%) and density, of the code that runs now (a method
        whose `select` was rewritten since the measurement is `superseded` there)."""
        table, at = self.profile.selection_ms.get(method), self.profile.selection_at
        numel = sum(self.work.sizes)
        if not table or abs(numel - int(at["numel"])) > SAME_LAYOUT * int(at["numel"]) or self.unmeasured_because(method):
            return None
        return table

    def unmeasured_because(self, method: str) -> str | None:
        """Why the profile's measurement of `method` does not apply here (None: it does, or there is none)."""
        at = self.profile.selection_at
        if method not in self.profile.selection_ms:
            return None
        numel, density = sum(self.work.sizes), self.density
        if abs(numel - int(at["numel"])) > SAME_LAYOUT * int(at["numel"]):
            return None  # another model: nothing was measured for it
        if density is not None and not math.isclose(density, float(at["density"]), rel_tol=1e-6):
            return f"{self.profile.gpu} measured d = {at['density']}, the study runs d = {density:g}"
        superseded = (at.get("superseded") or {}).get(method)
        if superseded:
            return f"{self.profile.gpu} measured the code of {at.get('code', '?')}, since rewritten: {superseded}"
        return None

    def point(self, method: Method, workers: int, network: NetworkModel) -> Point:
        compute_ms = self.compute_ms()[0] * self.compute_scale
        stats = method.statistics.at(workers)
        template = method.template
        ledger = at_workers(template.template, template.exchange,
                            {"union": template.template_union, "k_max": template.template_k_max}, stats, workers)
        if method.overlap:
            exchange_ms, exposed_ms = self._bucketed_ms(ledger, workers, network, compute_ms)
        else:
            exchange_ms = exposed_ms = network.price(ledger, workers) * 1e3
        overlapped = exchange_ms - exposed_ms
        select_ms = self.select_ms(method.name, workers, stats["select_ms"])[0] * self.select_scale
        return Point(method.name, workers, network.name, compute_ms, select_ms, exchange_ms,
                     overlapped, sent_bytes_max(ledger, workers), stats["union"], stats["k_max"],
                     workers in method.statistics.union.workers)

    def _bucketed_ms(self, ledger: list[Collective], workers: int, network: NetworkModel,
                     compute_ms: float) -> tuple[float, float]:
        """(exchange ms, exposed ms) of a DDP-style baseline (module docstring): each bucket
        carries its share of every collective of the ledger (a bucket of 5% of the gradient, 5%
        of the elements), priced on its own and started at its ready time; the exposed part is
        what is left after the backward."""
        backward_ms = compute_ms * self.work.backward_s / self.work.step_s
        numel = sum(self.work.sizes)
        ready, cost = [], []
        for fraction, elements in ddp_buckets(self.work):
            share = elements / numel
            scaled = [Collective(c.op, max(1, round(c.elements * share)), c.element_bytes, c.root, c.peer) for c in ledger]
            ready.append(fraction * backward_ms)
            cost.append(network.price(scaled, workers) * 1e3)
        return sum(cost), exposed_exchange_s(ready, cost, backward_ms)
