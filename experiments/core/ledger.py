"""A step's traffic ledger as one line of text, so that a run's metrics.jsonl keeps it.

The meter lists every collective a step issued (`TrafficMeter.collectives`); logging steps write
that list under `traffic/ledger`, one token per collective in the order issued:

    all_gather:1:4 all_gather:718:4 all_reduce:2301:4 broadcast:719:4@3

(`op:elements:element_bytes`, then `@root` for a broadcast, `@source>destination` for a
point-to-point message, `@stride` for a tree round). A string rather than nested lists:
the analysis reads metrics.jsonl with Arrow, which wants one type per column. Pricing a step on
another network, or at another worker count, replays these tokens (experiments/endtoend/), never
a second accounting of what the exchange sent.
"""
from __future__ import annotations

from experiments.core.traffic import Collective


def encode(collectives: list[Collective]) -> str:
    """The ledger line of `collectives`."""
    return " ".join(f"{c.op}:{c.elements}:{c.element_bytes}{_ranks(c)}" for c in collectives)


def _ranks(collective: Collective) -> str:
    if collective.root is None:
        return ""
    return f"@{collective.root}" + (f">{collective.peer}" if collective.peer is not None else "")


def decode(line: str) -> list[Collective]:
    """The collectives of a ledger line (`encode`'s inverse); raises ValueError on a bad token."""
    collectives = []
    for token in line.split():
        body, _, ranks = token.partition("@")
        root, _, peer = ranks.partition(">")
        try:
            op, elements, element_bytes = body.split(":")
            collectives.append(Collective(op, int(elements), int(element_bytes), int(root) if root else None,
                                          int(peer) if peer else None))
        except ValueError:
            raise ValueError(f"not a ledger token: {token!r} (expected op:elements:element_bytes[@root[>peer]])") from None
    return collectives
