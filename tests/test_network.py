"""The network model (flat and cluster) against hand-computed cases."""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from experiments.runformat.errors import ConfigError
from experiments.engine.core.network import NetworkModel
from experiments.engine.core.traffic import TrafficMeter

# 10 Gbit/s = 1.25e9 B/s; 20 us latency.
NET = NetworkModel("test", latency_us=20, bandwidth_gbit=10)


def test_ring_all_gather_by_hand():
    # W=4, 1 MB per rank: 3 * (20e-6 + 1e6 / 1.25e9) = 3 * 820e-6 s
    assert NET.all_gather_s(4, 1e6) == pytest.approx(3 * 820e-6)


def test_ring_all_reduce_by_hand():
    # W=4, 4 MB: 2 * 3 * (20e-6 + 1e6 / 1.25e9) = 6 * 820e-6 s
    assert NET.all_reduce_s(4, 4e6) == pytest.approx(6 * 820e-6)
    assert NET.all_reduce_s(1, 4e6) == 0.0


def test_tree_broadcast_by_hand():
    # W=5: ceil(log2 5) = 3 rounds of (20e-6 + 1e3 / 1.25e9)
    assert NET.broadcast_s(5, 1e3) == pytest.approx(3 * (20e-6 + 0.8e-6))


def test_meter_adds_up_the_collectives_of_a_step():
    meter = TrafficMeter(4, NET)
    meter.all_gather(1, 4)  # counts header
    meter.all_gather(250_000, 4)  # 1 MB of indices per rank
    meter.all_reduce(1_000_000, 4)  # 4 MB of values
    expected = 3 * (20e-6 + 4 / 1.25e9) + 3 * 820e-6 + 6 * 820e-6
    assert meter.model_s == pytest.approx(expected)
    meter.reset()
    assert meter.model_s == 0.0


@pytest.mark.parametrize("latency,bandwidth,key", [(-1, 10, "network.latency_us"), (5, 0, "network.bandwidth_gbit")])
def test_bad_network_values_name_the_key(latency, bandwidth, key):
    with pytest.raises(ConfigError, match=key):
        NetworkModel("bad", latency, bandwidth)


# -- the cluster model ---------------------------------------------------------------------------
# 4 nodes x 4 GPUs. Intra: 5 us, 1200 Gbit/s = 150e9 B/s per GPU. Inter: 25 us, 10 Gbit/s =
# 1.25e9 B/s per node. W = 16: N = 4 nodes, p = 4 ranks per node.
CLUSTER = dict(name="v100x4", latency_us=25, bandwidth_gbit=10, gpus_per_node=4, intra_latency_us=5,
               intra_bandwidth_gbit=1200)


def cluster(algorithm: str = "auto") -> NetworkModel:
    return NetworkModel(**CLUSTER, algorithm=algorithm)


def test_placement_fills_nodes_in_rank_order():
    assert (cluster().placement(16).nodes, cluster().placement(16).per_node) == (4, 4)
    assert (cluster().placement(6).nodes, cluster().placement(6).per_node) == (2, 4)  # last node partial
    assert (cluster().placement(3).nodes, cluster().placement(3).per_node) == (1, 3)  # W < g: one node


def test_flat_ring_all_reduce_moves_bytes_at_the_inter_node_rate_and_splits_its_latencies():
    # 16 MB: 2 * 15 steps of 1 MB, every step's bytes at the slowest link's rate (1e6 / 1.25e9 =
    # 800e-6); of each phase's 15 steps N-1 = 3 cross nodes (25e-6), 12 stay inside (5e-6):
    # 6 * 825e-6 + 24 * 805e-6 = 4.95e-3 + 19.32e-3 = 24.27e-3 s.
    assert cluster("ring").all_reduce_s(16, 16e6) == pytest.approx(24.27e-3, rel=1e-12)
    # one node (W=3 < g=4): 2 * 2 steps of 1 MB over NVLink: 5e-6 + 1e6 / 150e9 = 11.6667e-6
    assert cluster("ring").all_reduce_s(3, 3e6) == pytest.approx(4 * (5e-6 + 1e6 / 150e9), rel=1e-12)
    assert cluster("ring").all_reduce_s(1, 3e6) == 0.0


def test_hierarchical_all_reduce_by_hand():
    # 16 MB, p = 4, N = 4. Intra reduce-scatter + all-gather: 2 * 3 * (5e-6 + 4e6 / 150e9)
    # = 6 * 31.6667e-6 = 190e-6. Inter ring of 4 MB per local rank, 4 rings on one NIC:
    # 2 * 3 * (25e-6 + 16e6 / (4 * 1.25e9)) = 6 * 3.225e-3 = 19.35e-3. Total 19.54e-3 s.
    assert cluster("hierarchical").all_reduce_s(16, 16e6) == pytest.approx(19.54e-3, rel=1e-12)


def test_tree_all_reduce_by_hand():
    # 16 MB: latency 2 * (3 * 5e-6 + ceil(log2 4) * 25e-6) = 130e-6; bandwidth 2 * 16e6 / 1.25e9
    # = 25.6e-3 (the inter link is the slowest). Total 25.73e-3 s.
    assert cluster("tree").all_reduce_s(16, 16e6) == pytest.approx(25.73e-3, rel=1e-12)
    # 4 KB: 130e-6 + 2 * 4000 / 1.25e9 = 136.4e-6
    assert cluster("tree").all_reduce_s(16, 4000) == pytest.approx(136.4e-6, rel=1e-12)


def test_auto_picks_the_cheapest_all_reduce_per_size():
    # 4 KB: ring 6 * (25e-6 + 250 / 1.25e9) + 24 * (5e-6 + 250 / 1.25e9) = 151.2e-6 + 124.8e-6
    # = 276e-6; hierarchical 6 * (5e-6 + 1000 / 150e9) + 6 * (25e-6 + 4000 / 5e9) = 30.04e-6 +
    # 154.8e-6 = 184.84e-6; tree 136.4e-6: tree.
    net = cluster("auto")
    assert cluster("ring").all_reduce_s(16, 4000) == pytest.approx(276e-6, rel=1e-12)
    assert cluster("hierarchical").all_reduce_s(16, 4000) == pytest.approx(184.84e-6, rel=1e-12)
    assert net.all_reduce_algorithm(16, 4000) == "tree"
    assert net.all_reduce_s(16, 4000) == pytest.approx(136.4e-6, rel=1e-12)
    # 16 MB: ring 24.27e-3, hierarchical 19.54e-3, tree 25.73e-3: hierarchical.
    assert net.all_reduce_algorithm(16, 16e6) == "hierarchical"
    assert net.all_reduce_s(16, 16e6) == pytest.approx(19.54e-3, rel=1e-12)


def test_all_gather_flat_hierarchical_and_bruck_by_hand():
    # 1 MB per rank, W = 16. Flat ring: 15 steps of 1e6 / 1.25e9 = 800e-6, 3 of them across nodes
    # (25e-6), 12 inside (5e-6): 3 * 825e-6 + 12 * 805e-6 = 2.475e-3 + 9.66e-3 = 12.135e-3.
    assert cluster("ring").all_gather_s(16, 1e6) == pytest.approx(12.135e-3, rel=1e-12)
    # Hierarchical: inter 3 * (25e-6 + 4 * 1e6 / 1.25e9) = 3 * 3.225e-3 = 9.675e-3; intra
    # 3 * (5e-6 + 4e6 / 150e9) = 3 * 31.6667e-6 = 95e-6. Total 9.77e-3 s.
    assert cluster("hierarchical").all_gather_s(16, 1e6) == pytest.approx(9.77e-3, rel=1e-12)
    # Bruck: across the 4 nodes 2 * 25e-6 + 3 * 4 * 1e6 / 1.25e9 = 9.65e-3, inside 2 * 5e-6 +
    # 3 * 4e6 / 150e9 = 90e-6: 9.74e-3 s, the cheapest: auto takes it.
    assert cluster("auto").all_gather_s(16, 1e6) == pytest.approx(9.74e-3, rel=1e-12)
    assert cluster("auto").all_gather_algorithm(16, 1e6) == "bruck"
    assert cluster("tree").all_gather_s(16, 1e6) == pytest.approx(12.135e-3, rel=1e-12)  # no tree all-gather


def test_broadcast_binomial_and_pipelined_ring_by_hand():
    # 1 MB, W = 16. Binomial: 2 rounds across nodes of 825e-6, 2 inside of 5e-6 + 1e6 / 150e9:
    # 1.65e-3 + 2 * 11.6667e-6 = 1.673333e-3.
    assert cluster("ring").broadcast_s(16, 1e6) == pytest.approx(1.65e-3 + 2 * (5e-6 + 1e6 / 150e9), rel=1e-12)
    # Pipelined chain: 3 inter hops * 25e-6 + 12 intra hops * 5e-6 + 1e6 / 1.25e9 = 935e-6; auto.
    assert cluster("auto").broadcast_s(16, 1e6) == pytest.approx(935e-6, rel=1e-12)


def test_all_to_all_prices_intra_and_inter_pairs_by_their_links():
    # 100 KB per pair, W = 16, p = 4. Intra: 3 * (5e-6 + 1e5 / 150e9) = 17e-6. Inter: 12 * 25e-6
    # + 4 * 12 * 1e5 / 1.25e9 = 300e-6 + 3.84e-3 = 4.14e-3 (the NIC carries 4 ranks' messages).
    assert cluster().all_to_all_s(16, 1e5) == pytest.approx(4.14e-3, rel=1e-12)
    # One node of 4: 3 * (5e-6 + 1e5 / 150e9) = 17e-6.
    assert cluster().all_to_all_s(4, 1e5) == pytest.approx(17e-6, rel=1e-12)
    # One rank per node (the flat net, W = 4): 3 * (20e-6 + 1e5 / 1.25e9) = 3 * 100e-6.
    assert NET.all_to_all_s(4, 1e5) == pytest.approx(300e-6, rel=1e-12)


def test_point_to_point_takes_the_link_between_the_two_ranks():
    assert cluster().point_to_point_s(16, 1e6, 1, 2) == pytest.approx(5e-6 + 1e6 / 150e9, rel=1e-12)  # node 0
    assert cluster().point_to_point_s(16, 1e6, 3, 4) == pytest.approx(825e-6, rel=1e-12)  # nodes 0 and 1
    assert cluster().point_to_point_s(16, 1e6, 5, 5) == 0.0


@pytest.mark.parametrize("algorithm", ["ring", "hierarchical"])
def test_one_gpu_per_node_is_the_flat_model_exactly(algorithm):
    """gpus_per_node=1, no intra link: the formulas of before, bit for bit (ring and
    hierarchical coincide there). 10gbe, W=4: all-reduce of 4 MB 2 * 3 * (25e-6 + 1e6 / 1.25e9)."""
    flat = NetworkModel("10gbe", 25, 10, algorithm=algorithm)
    alpha, beta = 25 * 1e-6, 10 * 1e9 / 8
    for W in (2, 3, 4, 16, 64):
        for n in (4.0, 4e3, 4e6, 1e8):
            assert flat.all_reduce_s(W, n) == 2 * (W - 1) * (alpha + n / W / beta)
            assert flat.all_gather_s(W, n) == (W - 1) * (alpha + n / beta)
            assert flat.broadcast_s(W, n) == math.ceil(math.log2(W)) * (alpha + n / beta)
    assert flat.all_reduce_s(4, 4e6) == pytest.approx(6 * 825e-6, rel=1e-12)


def test_price_walks_the_ledger_and_the_meter_uses_it():
    # W = 16 on the cluster, auto: a 4-byte count header all-gathered (Bruck: 2 * 25e-6 + 3 * 16 /
    # 1.25e9 + 2 * 5e-6 + 3 * 16 / 150e9 = 60e-6 + 38.4e-9 + 0.32e-9 = 60.03872e-6), 16 MB
    # all-reduced (19.54e-3), 1 MB broadcast (935e-6), a 1 MB message from rank 3 to rank 4 (825e-6).
    meter = TrafficMeter(16, cluster())
    meter.all_gather(1, 4)
    meter.all_reduce(4_000_000, 4)
    meter.broadcast(250_000, 4, root=0)
    meter.point_to_point(250_000, 4, 3, 4)
    expected = 60.03872e-6 + 19.54e-3 + 935e-6 + 825e-6
    assert cluster().price(meter.collectives, 16) == pytest.approx(expected, rel=1e-12)
    assert meter.model_s == cluster().price(meter.collectives, 16)
    assert TrafficMeter(16).model_s == 0.0


def test_all_to_all_and_point_to_point_bytes():
    meter = TrafficMeter(4)
    meter.all_to_all(10, 4)  # 40 bytes to each of 3 others
    meter.point_to_point(5, 4, 0, 3)
    assert list(meter.sent) == [140.0, 120.0, 120.0, 120.0]
    assert list(meter.recv) == [120.0, 120.0, 120.0, 140.0]


@pytest.mark.parametrize("changes,key", [
    (dict(gpus_per_node=4), "network.intra_latency_us is null but network.gpus_per_node=4"),
    (dict(gpus_per_node=4, intra_latency_us=5), "network.intra_bandwidth_gbit is null"),
    (dict(gpus_per_node=0), "network.gpus_per_node must be an integer >= 1"),
    (dict(gpus_per_node=2.5), "network.gpus_per_node must be an integer >= 1"),
    (dict(intra_latency_us=-1), "network.intra_latency_us must be >= 0"),
    (dict(intra_bandwidth_gbit=0), "network.intra_bandwidth_gbit must be > 0"),
    (dict(algorithm="fastest"), "network.algorithm must be one of auto, ring, hierarchical, tree"),
])
def test_bad_cluster_values_name_the_key_and_the_fix(changes, key):
    with pytest.raises(ConfigError, match=re.escape(key)):
        NetworkModel("bad", 10, 10, **changes)


PRESETS = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "conf" / "network").glob("*.yaml"))


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_loads_without_hydra_and_comments_every_number(name):
    net = NetworkModel.preset(name)
    assert net.name == name
    text = (Path(__file__).resolve().parents[1] / "conf" / "network" / f"{name}.yaml").read_text()
    for line in text.splitlines():
        if line and not line.startswith(("#", " ", "name:")):
            assert "#" in line, f"{name}.yaml: every key says where its number comes from: {line}"


def test_the_papers_cluster_presets():
    for name, inter in (("v100x4_10gbe", 10), ("v100x4_25gbe", 25), ("v100x4_100g_ib", 100)):
        net = NetworkModel.preset(name)
        assert (net.gpus_per_node, net.intra_bandwidth_gbit, net.bandwidth_gbit) == (4, 1200, inter)
    with pytest.raises(ConfigError, match="no such preset"):
        NetworkModel.preset("carrier_pigeon")


def test_a_tree_round_takes_its_slowest_message_and_meters_each_pair():
    """gTop-k's round of stride s: rank r (r mod 2s = s) sends to r - s, all at once. On the
    cluster (4 GPUs a node), W = 16: strides 1 and 2 pair ranks of one node (5e-6 + 1e6 / 150e9);
    stride 4 sends 4 -> 0, 12 -> 8 across nodes (825e-6), stride 8 sends 8 -> 0 across."""
    intra, inter = 5e-6 + 1e6 / 150e9, 825e-6
    assert [cluster().tree_round_s(16, 1e6, s) for s in (1, 2, 4, 8)] == pytest.approx([intra, intra, inter, inter], rel=1e-12)
    assert cluster().tree_round_s(1, 1e6, 1) == 0.0  # no pair
    meter = TrafficMeter(8, NET)
    meter.tree_round(10, 4, 2)  # 2 -> 0, 6 -> 4
    assert list(meter.sent) == [0, 0, 40, 0, 0, 0, 40, 0] and list(meter.recv) == [40, 0, 0, 0, 40, 0, 0, 0]
    assert meter.model_s == pytest.approx(20e-6 + 40 / 1.25e9, rel=1e-12)  # one message's time, not two


def test_a_shift_round_takes_its_largest_message_and_its_busiest_nic():
    """Ok-Topk's reduce-scatter round of shift s: every rank r sends to r + s mod W, at once, each
    message priced at the round's largest (1 MB). Cluster, W = 16 (4 a node): shift 1 sends one
    message out of each node (25e-6 + 1e6 / 1.25e9 = 825e-6), beside intra-node ones (faster);
    shift 2 two (ranks 2 and 3 of each node: 25e-6 + 2 * 800e-6), shift 4 all four (25e-6 + 4 *
    800e-6). One rank per node: one message, the flat model's msg(n)."""
    assert [cluster().shift_round_s(16, 1e6, s) for s in (1, 2, 4)] == pytest.approx([825e-6, 1625e-6, 3225e-6], rel=1e-12)
    assert cluster().shift_round_s(3, 1e6, 1) == pytest.approx(5e-6 + 1e6 / 150e9, rel=1e-12)  # one node
    assert NET.shift_round_s(4, 1e6, 1) == pytest.approx(820e-6, rel=1e-12)
    assert NET.shift_round_s(1, 1e6, 1) == 0.0
    meter = TrafficMeter(4, NET)
    meter.shift_round([3, 0, 5, 1], 8, 1)  # r -> r + 1: uneven
    assert list(meter.sent) == [24, 0, 40, 8] and list(meter.recv) == [8, 24, 0, 40]
    assert meter.model_s == pytest.approx(20e-6 + 40 / 1.25e9, rel=1e-12)  # the largest message's time


def test_an_all_gatherv_meters_each_ring_step_and_is_priced_at_its_largest_block():
    """Ring all-gatherv of blocks 1 and 3 pairs (8 bytes) at W = 2: rank 0 sends its own block,
    rank 1 its own; each receives the other's. At W = 4, (W - 1) ring steps, each as slow as the
    largest block (1,000 pairs)."""
    meter = TrafficMeter(2, NET)
    meter.all_gather_v([1, 3], 8)
    assert list(meter.sent) == [8, 24] and list(meter.recv) == [24, 8]
    wide = TrafficMeter(4, NET)
    wide.all_gather_v([10, 1000, 0, 5], 8)
    assert wide.model_s == pytest.approx(3 * (20e-6 + 8000 / 1.25e9), rel=1e-12)
    # Rank r forwards every block but its successor's: of 1,015 pairs in all.
    assert list(wide.sent) == [8 * (1015 - 1000), 8 * (1015 - 0), 8 * (1015 - 5), 8 * (1015 - 10)]


# -- log-latency all-gather, the ring's latency split, efficiency, the DGX and V100 presets -------
def test_bruck_all_gather_by_hand_at_a_power_of_two_and_not():
    """One rank per node (20 us, 1.25e9 B/s), 1 KB per rank. W = 8: recursive doubling, step i
    sending 2^i blocks: (20e-6 + 0.8e-6) + (20e-6 + 1.6e-6) + (20e-6 + 3.2e-6) = 3 * 20e-6 + 7 *
    0.8e-6 = 65.6e-6, against the ring's 7 * 20.8e-6 = 145.6e-6: auto takes it. W = 6 (Bruck):
    ceil(log2 6) = 3 steps of 1, 2 and min(4, 6 - 4) = 2 blocks: 60e-6 + 5 * 0.8e-6 = 64e-6."""
    auto = NetworkModel("test", latency_us=20, bandwidth_gbit=10, algorithm="auto")
    doubling = sum(20e-6 + 2**i * 1e3 / 1.25e9 for i in range(3))
    assert auto.all_gather_s(8, 1e3) == pytest.approx(doubling, rel=1e-12) == pytest.approx(65.6e-6, rel=1e-12)
    assert auto.all_gather_algorithm(8, 1e3) == "bruck"
    assert NET.all_gather_s(8, 1e3) == pytest.approx(145.6e-6, rel=1e-12)  # pinned ring: as before
    assert auto.all_gather_s(6, 1e3) == pytest.approx(64e-6, rel=1e-12)
    assert auto.all_gather_s(1, 1e3) == 0.0


def test_bruck_all_gather_on_nodes_goes_across_them_then_inside():
    """W = 8 on the cluster (N = 2 nodes of p = 4), 1 MB per rank: across, 1 step of 4 blocks
    through the NIC: 25e-6 + 4e6 / 1.25e9 = 3.225e-3; inside, 2 steps moving 3 blocks of
    N m = 2 MB: 2 * 5e-6 + 3 * 2e6 / 150e9 = 50e-6. Total 3.275e-3 s."""
    from experiments.engine.core.collective_costs import bruck_all_gather_s

    assert bruck_all_gather_s(cluster().placement(8), 1e6) == pytest.approx(3.275e-3, rel=1e-12)
    # one node of 3: ceil(log2 3) = 2 steps, 2 blocks: 2 * 5e-6 + 2 * 1e6 / 150e9
    assert bruck_all_gather_s(cluster().placement(3), 1e6) == pytest.approx(10e-6 + 2e6 / 150e9, rel=1e-12)


def test_the_flat_ring_pays_inter_node_latency_only_on_the_steps_that_cross_nodes():
    """W = 8, p = 4, N = 2. All-gather of 1 MB per rank: 7 steps, every step's 1 MB at the NIC's
    rate (800e-6), N - 1 = 1 step with the inter latency (25e-6), 6 with the intra one (5e-6):
    825e-6 + 6 * 805e-6 = 5.655e-3 s (it was 7 * 825e-6 = 5.775e-3). All-reduce of 8 MB: 14 steps of
    1 MB, 2 (N - 1) = 2 across: 2 * 825e-6 + 12 * 805e-6 = 11.31e-3 s."""
    assert cluster("ring").all_gather_s(8, 1e6) == pytest.approx(5.655e-3, rel=1e-12)
    assert cluster("ring").all_reduce_s(8, 8e6) == pytest.approx(11.31e-3, rel=1e-12)


def test_efficiency_scales_each_links_beta_and_nics_add_up():
    # Inter at 80% of 10 Gbit/s: 1e9 B/s. Ring all-gather, W = 4, 1 MB: 3 * (20e-6 + 1e-3).
    assert NetworkModel("e", 20, 10, efficiency=0.8).all_gather_s(4, 1e6) == pytest.approx(3 * 1020e-6, rel=1e-12)
    # 8 NICs of 10 Gbit/s at 50%: 40 Gbit/s = 5e9 B/s a node.
    assert NetworkModel("n", 20, 10, nics_per_node=8, efficiency=0.5).inter.bytes_per_s == pytest.approx(5e9, rel=1e-12)
    # Intra at 50% of 150e9 B/s, one node of 3: ring all-reduce of 3 MB, 4 steps of 1 MB.
    half = NetworkModel(**CLUSTER, algorithm="ring", intra_efficiency=0.5)
    assert half.all_reduce_s(3, 3e6) == pytest.approx(4 * (5e-6 + 1e6 / 75e9), rel=1e-12)


@pytest.mark.parametrize("changes,key", [
    (dict(efficiency=0), "network.efficiency must be in (0, 1], got 0"),
    (dict(efficiency=1.5), "network.efficiency must be in (0, 1], got 1.5"),
    (dict(intra_efficiency=-0.1), "network.intra_efficiency must be in (0, 1], got -0.1"),
    (dict(nics_per_node=0), "network.nics_per_node must be an integer >= 1"),
    (dict(bf16="no"), "network.bf16 must be true or false"),
])
def test_bad_efficiency_nics_and_bf16_name_the_key_and_the_fix(changes, key):
    with pytest.raises(ConfigError, match=re.escape(key)):
        NetworkModel("bad", 10, 10, **changes)


def test_auto_all_gather_at_1024_workers_takes_bruck_when_small_and_the_ring_when_large():
    """v100x4_25gbe (inter 15 us, 25 Gbit/s x 0.8 = 2.5e9 B/s; intra 5 us, 150e9 x 0.8 = 120e9 B/s),
    W = 1,024: N = 256 nodes of 4. The issue's case, DEFT's size header, one int32 per rank:
    hierarchical 255 * (15e-6 + 16 / 2.5e9) + 3 * (5e-6 + 1024 / 120e9) = 3.8417e-3 (3.84 ms at
    line rate, the 3.8 ms of before); Bruck 8 * 15e-6 + 255 * 16 / 2.5e9 + 2 * 5e-6 + 3 * 1024 / 120e9
    = 131.6576e-6: auto takes it, 29x less. At 10 MB per rank the ring moves fewer bytes over
    NVLink: ring 255 * (15e-6 + 4e-3) + 768 * (5e-6 + 4e-3) = 4.099665 s, Bruck 120e-6 + 255 *
    4e7 / 2.5e9 + 10e-6 + 3 * 2.56e9 / 120e9 = 4.14413 s, hierarchical 4.14784 s: the ring."""
    net = NetworkModel.preset("v100x4_25gbe")
    assert NetworkModel(**{**net.__dict__, "algorithm": "hierarchical"}).all_gather_s(1024, 4) == pytest.approx(
        255 * (15e-6 + 16 / 2.5e9) + 3 * (5e-6 + 1024 / 120e9), rel=1e-12)
    line_rate = NetworkModel(**{**net.__dict__, "algorithm": "hierarchical", "efficiency": 1.0, "intra_efficiency": 1.0})
    assert line_rate.all_gather_s(1024, 4) == pytest.approx(3.8413e-3, rel=1e-4)  # the 3.8 ms
    assert net.all_gather_algorithm(1024, 4) == "bruck"
    assert net.all_gather_s(1024, 4) == pytest.approx(131.6576e-6, rel=1e-12)
    assert net.all_gather_algorithm(1024, 1e7) == "ring"
    assert net.all_gather_s(1024, 1e7) == pytest.approx(4.099665, rel=1e-12)
    # 160 indices per rank (640 B), the other 4.0 ms: 8 * 15e-6 + 255 * 2560 / 2.5e9 +
    # 10e-6 + 3 * 256 * 640 / 120e9 = 395.216e-6.
    assert net.all_gather_s(1024, 640) == pytest.approx(120e-6 + 255 * 2560 / 2.5e9 + 10e-6 + 3 * 256 * 640 / 120e9, rel=1e-12)


def test_an_all_gatherv_takes_the_log_latency_variant_at_its_largest_block():
    """Uneven blocks (at most 3 int32s) at W = 1,024 on v100x4_25gbe: Bruck at m = 12 bytes, an
    upper bound (step i forwards min(2^i, W - 2^i) blocks, none larger than the largest)."""
    net = NetworkModel.preset("v100x4_25gbe")
    meter = TrafficMeter(1024, net)
    meter.all_gather_v([i % 4 for i in range(1024)], 4)
    assert meter.model_s == pytest.approx(8 * 15e-6 + 255 * 48 / 2.5e9 + 10e-6 + 3 * 256 * 12 / 120e9, rel=1e-12)


def test_the_dgx_presets_pool_eight_nics_per_node_at_nccls_efficiencies():
    a100, h100 = NetworkModel.preset("dgx_a100_200g_ib"), NetworkModel.preset("dgx_h100_400g_ib")
    assert (a100.gpus_per_node, a100.nics_per_node, a100.bandwidth_gbit, a100.intra_bandwidth_gbit) == (8, 8, 200, 2400)
    assert (h100.gpus_per_node, h100.nics_per_node, h100.bandwidth_gbit, h100.intra_bandwidth_gbit) == (8, 8, 400, 3600)
    # 8 x 25e9 B/s x 0.96 = 192e9 B/s a node; NVLink 300e9 x 0.78 = 234e9 B/s a GPU.
    assert (a100.inter.bytes_per_s, a100.intra.bytes_per_s) == (pytest.approx(192e9), pytest.approx(234e9))
    # 8 x 50e9 x 0.96 = 384e9; 450e9 x 0.82 = 369e9.
    assert (h100.inter.bytes_per_s, h100.intra.bytes_per_s) == (pytest.approx(384e9), pytest.approx(369e9))
    assert a100.bf16 and h100.bf16
    for name in ("a100x8_200g_ib", "h100x8_400g_ib"):  # the single-NIC presets say so
        assert NetworkModel.preset(name).nics_per_node == 1


def test_v100_presets_have_no_bf16_and_the_flat_presets_stay_at_line_rate():
    for name in ("v100x4_10gbe", "v100x4_25gbe", "v100x4_100g_ib"):
        assert NetworkModel.preset(name).bf16 is False
    for name in ("10gbe", "25gbe", "100g_ib", "nvlink", "custom"):
        net = NetworkModel.preset(name)
        assert (net.efficiency, net.intra_efficiency, net.nics_per_node, net.algorithm) == (1, 1, 1, "ring")


def test_the_h200_cluster_presets():
    """The end-to-end study's clusters (issue 46): DGX H200 (8 NDR NICs a node) and the commodity
    RoCE nodes of one 100 or 200 GbE NIC, all on NVLink 4 at 450 GB/s per direction."""
    dgx, e100, e200 = (NetworkModel.preset(n) for n in ("dgx_h200_400g_ib", "h200x8_100gbe_roce", "h200x8_200gbe_roce"))
    for net in (dgx, e100, e200):
        assert (net.gpus_per_node, net.intra_bandwidth_gbit, net.intra_efficiency, net.bf16) == (8, 3600, 0.82, True)
    assert (dgx.bandwidth_gbit, dgx.nics_per_node, dgx.efficiency) == (400, 8, 0.96)
    assert [(n.bandwidth_gbit, n.nics_per_node, n.efficiency) for n in (e100, e200)] == [(100, 1, 0.8), (200, 1, 0.8)]
