"""The alpha-beta network model against hand-computed cases."""
from __future__ import annotations

import pytest

from experiments.errors import ConfigError
from experiments.core.network import NetworkModel
from experiments.core.traffic import TrafficMeter

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
