"""One function per collective and algorithm: its time on a placement (cluster.py).

Notation: W ranks, N nodes of p ranks; intra link (a_i, b_i) per GPU, inter link (a_e, b_e) per
node; msg_x(n) = a_x + n / b_x. Every formula is written out in docs/network.md and checked
against hand-computed numbers in tests/test_network.py. With one rank per node (p = 1, N = W)
ring, hierarchical ring and the binomial tree reduce to the flat alpha-beta model's formulas,
exactly: ring all-reduce 2(W-1) msg(n/W), ring all-gather (W-1) msg(m), binomial broadcast
ceil(log2 W) msg(n).

Each link's beta is its line rate times its efficiency (network.py: what NCCL reaches of it).
"""
from __future__ import annotations

import math

from experiments.engine.core.cluster import Placement


def _log2_ceil(x: int) -> int:
    return math.ceil(math.log2(x)) if x > 1 else 0


# -- all-reduce of n bytes ----------------------------------------------------------------------
def ring_s(c: Placement, steps: int, inter_steps: int, nbytes: float) -> float:
    """`steps` steps of a flat ring over all W ranks (nodes in rank order), n bytes a step, of
    which `inter_steps` pay the inter-node latency and the rest the intra-node one (NCCL's
    tuning model: a step's latency is that of the hop the data takes); every step's bytes move
    at the slowest link's rate, since in a pipelined ring all hops carry data at once:
        inter_steps * (a_e + n / b_slow) + (steps - inter_steps) * (a_i + n / b_slow),
    b_slow = min(b_e, b_i) once the ring spans nodes. On one node: steps * msg_i(n); one rank per
    node (no intra link): steps * msg_e(n), the flat model's, to the bit."""
    if steps <= 0:
        return 0.0
    if c.nodes == 1:
        return steps * c.intra.message_s(nbytes) if c.intra is not None else 0.0
    if c.intra is None:
        return steps * c.inter.message_s(nbytes)
    per_byte = 1.0 / c.slowest_bytes_per_s()
    inter = inter_steps * (c.inter.alpha_s + nbytes * per_byte)
    return inter + (steps - inter_steps) * (c.intra.alpha_s + nbytes * per_byte)


def ring_all_reduce_s(c: Placement, nbytes: float) -> float:
    """Flat ring over all W ranks: reduce-scatter then all-gather, 2(W-1) steps of n/W bytes.
    Of each phase's W-1 steps, N-1 cross a node boundary (the path of a block that starts at a
    node's first rank), the others stay inside a node (ring_s):
        2 (N-1) * (a_e + n / (W b_slow))  +  2 (W-N) * (a_i + n / (W b_slow)).
    NCCL's tuner charges 2N inter steps (one more per phase); N-1 keeps one GPU per node the flat
    model's 2 (W-1) * msg(n / W) exactly."""
    W, N = c.world_size, c.nodes
    return ring_s(c, 2 * (W - 1), 2 * (N - 1), nbytes / W) if W > 1 else 0.0


def hierarchical_all_reduce_s(c: Placement, nbytes: float) -> float:
    """Intra reduce-scatter, inter ring all-reduce of 1/p of the data among the N nodes, intra
    all-gather:
        2 (p-1) * msg_i(n / p)  +  2 (N-1) * (a_e + n / (N b_e)).
    The inter phase is p rings at once (one per local rank, each on its n/p shard); each step
    moves n/(pN) per ring, so p * n/(pN) = n/N through the node's shared NIC."""
    p, N = c.per_node, c.nodes
    intra = 2 * (p - 1) * c.intra.message_s(nbytes / p) if p > 1 else 0.0
    inter = 2 * (N - 1) * c.inter.message_s(nbytes / N) if N > 1 else 0.0  # a_e + (n/N)/b_e
    return intra + inter


def tree_all_reduce_s(c: Placement, nbytes: float) -> float:
    """NCCL-style: a chain through the p GPUs of each node, a double binary tree across the N
    nodes (each tree carries half the data; a node is interior in at most one of them), reduce up
    then broadcast down, pipelined in small chunks:
        2 ((p-1) a_i + ceil(log2 N) a_e)  +  2 n / b_slowest.
    Latency: the depth of the chain plus the tree, up and down. Bandwidth: pipelining streams
    the data through every link at once, so the slowest link used decides, and it carries n up
    and n down; this is NCCL's own tuning model (tree bus bandwidth with ratio 1/2)."""
    p, N = c.per_node, c.nodes
    if c.world_size == 1:
        return 0.0
    latency = (p - 1) * (c.intra.alpha_s if p > 1 else 0.0) + _log2_ceil(N) * c.inter.alpha_s
    return 2 * latency + 2 * nbytes / c.slowest_bytes_per_s()


ALL_REDUCE = {"ring": ring_all_reduce_s, "hierarchical": hierarchical_all_reduce_s, "tree": tree_all_reduce_s}


# -- all-gather, m bytes from every rank --------------------------------------------------------
def ring_all_gather_s(c: Placement, bytes_per_rank: float) -> float:
    """Flat ring: (W-1) steps, each rank forwarding one rank's m bytes, N-1 of them across a
    node boundary (ring_s, NCCL's count for the all-gather):
        (N-1) * (a_e + m / b_slow)  +  (W-N) * (a_i + m / b_slow)."""
    W, N = c.world_size, c.nodes
    return ring_s(c, W - 1, N - 1, bytes_per_rank) if W > 1 else 0.0


def hierarchical_all_gather_s(c: Placement, bytes_per_rank: float) -> float:
    """Inter ring all-gather among same-local-rank GPUs (p rings at once sharing the NIC, m each
    per step), then intra ring all-gather of the N*m bytes each rank now holds:
        (N-1) * (a_e + p m / b_e)  +  (p-1) * msg_i(N m)."""
    p, N, m = c.per_node, c.nodes, bytes_per_rank
    inter = (N - 1) * c.inter.message_s(p * m) if N > 1 else 0.0
    intra = (p - 1) * c.intra.message_s(N * m) if p > 1 else 0.0
    return inter + intra


def bruck_s(link, ranks: int, block: float) -> float:
    """Bruck's all-gather among `ranks` ranks over one link, `block` bytes from each: ceil(log2 R)
    steps, step i sending min(2^i, R - 2^i) blocks (R-1 in all); recursive doubling is the same
    at a power of two (step i sends 2^i blocks):
        ceil(log2 R) * a  +  (R-1) * block / b.
    The final local rotation (a memory copy) is not charged."""
    return _log2_ceil(ranks) * link.alpha_s + (ranks - 1) * block / link.bytes_per_s if ranks > 1 else 0.0


def bruck_all_gather_s(c: Placement, bytes_per_rank: float) -> float:
    """Log-latency all-gather (Bruck; recursive doubling at a power of two; NCCL's PAT with one
    GPU per node): across nodes first, p Brucks at once among same-local-rank GPUs sharing the
    NIC (m each, so p m per block through it), then inside every node a Bruck of the N m bytes
    each rank holds:
        ceil(log2 N) a_e + (N-1) p m / b_e  +  ceil(log2 p) a_i + (p-1) N m / b_i.
    The same bytes as the ring's, in ceil(log2 N) + ceil(log2 p) latencies instead of W-1: the
    algorithm NCCL (PAT) and MPI (Bruck, recursive doubling) use for small all-gathers. One rank
    per node: ceil(log2 W) a + (W-1) m / b."""
    p, N, m = c.per_node, c.nodes, bytes_per_rank
    inter = bruck_s(c.inter, N, p * m) if N > 1 else 0.0
    intra = bruck_s(c.intra, p, N * m) if p > 1 else 0.0
    return inter + intra


ALL_GATHER = {"ring": ring_all_gather_s, "hierarchical": hierarchical_all_gather_s, "bruck": bruck_all_gather_s}


# -- broadcast of n bytes -----------------------------------------------------------------------
def binomial_broadcast_s(c: Placement, nbytes: float) -> float:
    """Binomial tree across nodes (one rank per node), then within every node at once; each
    round sends the whole message:
        ceil(log2 N) * msg_e(n)  +  ceil(log2 p) * msg_i(n)."""
    p, N = c.per_node, c.nodes
    inter = _log2_ceil(N) * c.inter.message_s(nbytes)
    intra = _log2_ceil(p) * c.intra.message_s(nbytes) if p > 1 else 0.0
    return inter + intra


def pipelined_ring_broadcast_s(c: Placement, nbytes: float) -> float:
    """NCCL's broadcast: a chain through all W ranks (nodes in order, so N-1 hops cross nodes and
    W-N stay inside one), the message cut into chunks small enough that the chain's fill time is
    only its latency (the idealisation: chunk latency is not charged per chunk):
        (N-1) a_e + (W-N) a_i  +  n / b_slowest."""
    W, N = c.world_size, c.nodes
    if W == 1:
        return 0.0
    intra_alpha = c.intra.alpha_s if c.intra is not None else 0.0
    return (N - 1) * c.inter.alpha_s + (W - N) * intra_alpha + nbytes / c.slowest_bytes_per_s()


BROADCAST = {"binomial": binomial_broadcast_s, "pipelined_ring": pipelined_ring_broadcast_s}


# -- all-to-all and point-to-point --------------------------------------------------------------
def all_to_all_s(c: Placement, bytes_per_pair: float) -> float:
    """Every rank sends W-1 distinct messages of m bytes: p-1 to its own node, W-p to others.
    The two link kinds work at once; a rank pays each message's latency, and the node's NIC
    carries all p ranks' inter-node messages:
        max( (p-1) * msg_i(m),  (W-p) a_e + p (W-p) m / b_e )."""
    W, p, m = c.world_size, c.per_node, bytes_per_pair
    intra = (p - 1) * c.intra.message_s(m) if p > 1 else 0.0
    inter = (W - p) * c.inter.alpha_s + p * (W - p) * m / c.inter.bytes_per_s
    return max(intra, inter)


def point_to_point_s(c: Placement, nbytes: float, source: int, destination: int) -> float:
    """One message, over the link between the two ranks: msg_i(n) on one node, msg_e(n) across."""
    return 0.0 if source == destination else c.link_between(source, destination).message_s(nbytes)


def tree_round_pairs(stride: int, world_size: int) -> list[tuple[int, int]]:
    """(source, destination) of every message in a binomial-tree reduce round of `stride`:
    each rank r with r mod 2 stride = stride sends to r - stride (the rank that keeps merging)."""
    return [(source, source - stride) for source in range(stride, world_size, 2 * stride)]


def tree_round_s(c: Placement, nbytes: float, stride: int) -> float:
    """One round of a binomial-tree reduce: its messages travel at once, so the round takes its
    slowest. No two share a NIC: a message leaves its node only from the node's first `stride`
    ranks (its destination is `stride` below), and senders are 2 stride apart, so at most one
    message leaves (and one enters) any node."""
    pairs = tree_round_pairs(stride, c.world_size)
    return max((point_to_point_s(c, nbytes, source, destination) for source, destination in pairs), default=0.0)


def shift_pairs(shift: int, world_size: int) -> list[tuple[int, int]]:
    """(source, destination) of every message of a shift round: r to r + shift mod W."""
    return [(source, (source + shift) % world_size) for source in range(world_size)]


def shift_round_s(c: Placement, nbytes: float, shift: int) -> float:
    """One round of Ok-Topk's reduce-scatter: every rank r sends to r + shift mod W at once, each
    message counted at the round's largest, n bytes. The messages that stay on a node take
    msg_i(n) side by side; those that leave a node share its NIC, the busiest node's x of them
    (out or in) taking a_e + x n / b_e. The round lasts as long as the slower of the two:
        max( msg_i(n) if any stays,  a_e + x n / b_e if any leaves ).
    With one rank per node this is msg(n), the flat model's point-to-point message."""
    W = c.world_size
    if W == 1 or shift % W == 0:
        return 0.0
    leaving, entering, stays = [0] * c.nodes, [0] * c.nodes, False
    for source, destination in shift_pairs(shift, W):
        if c.node_of(source) == c.node_of(destination):
            stays = True
        else:
            leaving[c.node_of(source)] += 1
            entering[c.node_of(destination)] += 1
    busiest = max(max(leaving), max(entering))
    intra = c.intra.message_s(nbytes) if stays and c.intra is not None else 0.0
    inter = c.inter.alpha_s + busiest * nbytes / c.inter.bytes_per_s if busiest else 0.0
    return max(intra, inter)
