"""Per-W numbers in a subject's dict: written as "<name>@W=<W>", read back in W order, so a
criterion stays a function of the numbers alone."""
from __future__ import annotations

from analysis.claims.claim import Numbers


def at(name: str, workers: float) -> str:
    """"buildup@W=4"."""
    return f"{name}@W={int(workers)}"


def by_workers(numbers: Numbers, name: str) -> list[tuple[int, float]]:
    """The (W, value) pairs of `name` in `numbers`, in increasing W."""
    prefix = f"{name}@W="
    return sorted((int(key[len(prefix):]), float(value)) for key, value in numbers.items() if key.startswith(prefix))
