"""A step's traffic ledger as one line of text, so that a run's metrics.jsonl keeps it.

The meter lists every collective a step issued (`TrafficMeter.collectives`); logging steps write
that list under `traffic/ledger`, one token per collective in the order issued:

    all_gather:1:4 all_gather:718:4 all_reduce:2301:4 broadcast:719:4@3

(`op:elements:element_bytes`, then `@root` for a broadcast, `@source>destination` for a
point-to-point message, `@stride` for a tree round). A string rather than nested lists:
the analysis reads metrics.jsonl with Arrow, which wants one type per column. Pricing a step on
another network, or at another worker count, replays these tokens (experiments/studies/endtoend/), never
a second accounting of what the exchange sent.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Collective:
    """One metered collective as the exchange issued it: the sizes the bytes were computed from.
    Hosted and real-process worlds must issue the same list for the same step (the tests
    compare them), so a size is never counted from one world's shortcut."""

    op: str  # "all_gather" | "all_reduce" | "broadcast" | "all_to_all" | "point_to_point" | "tree_round"
    # | "shift_round" | "all_gather_v"
    elements: int  # per rank for all_gather, per pair for all_to_all and tree_round, the largest
    # message for shift_round and all_gather_v; the whole tensor otherwise
    element_bytes: int
    root: int | None = None  # broadcast's root; point_to_point's source; tree_round's stride; shift_round's shift
    peer: int | None = None  # point_to_point's destination
    # shift_round: what each rank r sent (to r + shift); all_gather_v: each rank's block. The ledger
    # line keeps only the largest (`elements`, what the network model prices: a round, or a ring
    # step, lasts as long as its largest message); a replayed ledger sends it from every rank.
    sizes: tuple[int, ...] | None = None


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
