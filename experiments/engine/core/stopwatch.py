"""Per-rank phase times for one hosted step with one host sync (docs/speed.md).

A host timer around GPU work measures only the launches unless the host waits for the queue to
drain first, and draining after the plan, after every rank's select and after the exchange
costs W + 2 syncs per step, each an idle GPU. On CUDA the stopwatch records an event at each
mark instead and the step synchronizes once (`settle`), after which every interval is read off
its pair of events. On the CPU the marks are `time.perf_counter` readings, as before.
"""
from __future__ import annotations

import time
from typing import Union

import torch

Mark = Union[float, "torch.cuda.Event"]


def uses_events(device: torch.device) -> bool:
    """Whether marks on `device` are CUDA events (a module function: tests force it on the CPU)."""
    return device.type == "cuda"


class Stopwatch:
    """`mark()` at each boundary, `settle()` once after the last, then `ms(start, end)`."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.events = uses_events(device)
        self.settled = False

    def mark(self) -> Mark:
        if not self.events:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def settle(self, synchronize) -> None:
        """Waits once for the queued work (`synchronize`: the world's), so that every event
        recorded so far has completed and can be read."""
        synchronize()
        self.settled = True

    def ms(self, start: Mark, end: Mark) -> float:
        if not self.events:
            return (end - start) * 1e3
        if not self.settled:
            raise RuntimeError("Stopwatch.ms before settle(): an event still queued has no time")
        return float(start.elapsed_time(end))
