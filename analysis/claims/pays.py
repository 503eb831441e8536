"""The generic property "pays somewhere on the default clusters" (docs/claims.md, "Every method
against the field"): a method's per-step speedup over the best dense baseline, with its range
over the end-to-end model's eight moves, somewhere above 1.

The cells come from `make endtoend`'s model of the battery's ResNet-18 statistics runs
(experiments/studies/compare/pays.py): per cluster and W, the speedup, which is the method's
break-even (the largest steps ratio at which it still reaches a target sooner than dense), and
its range. The property holds where some cell's whole range lies above 1.0 (its lower end
`low` > 1): there the method's step is faster than the best dense step whichever end of its
least certain inputs is true, so it pays if it needs no more steps than that lower end times
dense's. It says nothing of the steps ratio, which only runs near convergence measure.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from analysis.claims.claim import Numbers, Statistic, finite
from analysis.claims.papers import NAMES
from sparsifiers import registry

PAYS_ABOVE = 1.0  # a break-even above 1: the step is faster than the best dense step


@dataclass(frozen=True)
class PerStep:
    """The modelled cells of every method a study priced: method -> one dict per (network, W)
    with `network`, `workers`, `speedup`, `low`, `high`; `missing`: why a method has none."""

    study: str
    networks: tuple[str, ...]
    cells: dict[str, list[dict]] = field(default_factory=dict)
    missing: str = "no per-step factor was modelled"


def best_cell(cells: list[dict]) -> dict:
    """The cell with the highest lower end of the break-even (the first such in the given order)."""
    return max(cells, key=lambda cell: cell["low"])


def break_even(per_step: PerStep | None, name: str) -> Statistic:
    """One subject, the study on its clusters: the highest lower end over its cells (`best low`),
    the speedup and W there, each cluster's highest lower end, and how many cells pay for sure."""
    entry = registry.method(name)
    if entry.dense_baseline:
        return Statistic(gaps=(f"not applicable, because {entry.title} is a dense baseline: the speedup is taken over "
                               "the best of them",))
    cells = (per_step.cells if per_step else {}).get(name, [])
    if not cells:
        return Statistic(gaps=(f"{NAMES[name]}: {per_step.missing if per_step else 'no per-step factor was modelled'}",))
    best = best_cell(cells)
    numbers = {"best low": best["low"], "break-even": best["speedup"], "W": float(best["workers"]),
               **{f"best low@{network}": best_cell([c for c in cells if c["network"] == network])["low"]
                  for network in per_step.networks if any(c["network"] == network for c in cells)},
               "cells paying": float(sum(cell["low"] > PAYS_ABOVE for cell in cells)), "cells": float(len(cells))}
    return Statistic({f"{name} | {per_step.study} on {', '.join(per_step.networks)}": numbers})


def pays_somewhere(numbers: Numbers) -> bool:
    low = numbers["best low"]
    return finite(low) and low > PAYS_ABOVE
