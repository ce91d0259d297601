"""The model's link terms: per-transfer M / B + L, a shard's links as queueing centres, saturation."""

from __future__ import annotations

import math

import pytest

from testbed.config.presets import PRESETS
from testbed.config.spec import expand, parse_spec
from testbed.model.mva import solve_mva
from testbed.model.network import link_centres, link_saturation_workers, link_terms, link_terms_for, transfer_s


def test_one_transfer_is_latency_plus_bytes_over_bandwidth():
    assert transfer_s(1e6, 1e6, 0.001) == pytest.approx(1.001)
    assert transfer_s(1e6, None, 0.001) == 0.001  # unshaped bandwidth: latency only
    with pytest.raises(ValueError):
        transfer_s(1, 0.0)


def test_terms_split_the_shard_demand_over_the_shards():
    t = link_terms(8e6, servers=4, pull_every=2, bandwidth_bytes_per_s=1e6, latency_s=0.01)
    assert t.push_s == pytest.approx(8.01) and t.pull_s == pytest.approx(8.01)  # all M bytes cross the worker's link
    assert t.shard_push_demand_s == pytest.approx(2.0)  # (M/S) / B at each shard
    assert t.shard_outbound_per_step_s == pytest.approx(1.0)  # a pull every 2 steps
    assert t.per_step_s == pytest.approx(8.01 + 8.01 / 2)


def test_terms_read_the_spec_in_bits_per_second():
    cfg = expand(parse_spec({"name": "n", "gradient_bytes": "1MB", "servers": 2,
                             "network": {"bandwidth": "8Mbit", "latency": "1ms",
                                         "same_node": {"bandwidth": "80Mbit"}}}))[0]
    remote = link_terms_for(cfg)
    assert remote.push_s == pytest.approx(1.001) and remote.shard_push_demand_s == pytest.approx(0.5)
    assert link_terms_for(cfg, same_node=True).push_s == pytest.approx(0.1)
    unshaped = link_terms_for(expand(parse_spec({"name": "u"}))[0])
    assert not unshaped.shaped and link_centres(unshaped) == []


def test_the_shards_link_saturates_where_its_demand_fills_a_step():
    # ResNet-50 on V100 over 10 GbE, one shard (docs/network.md works this example).
    p = PRESETS["resnet50"]
    t = link_terms(p.gradient_bytes, 1, 1, 10e9 / 8)
    step_s = p.timing().seconds + t.push_s + t.pull_s
    n_star = link_saturation_workers(step_s, t)
    assert n_star == pytest.approx(step_s / (p.gradient_bytes / 1.25e9))
    assert 4 < n_star < 5
    assert link_saturation_workers(1.0, link_terms(1e6, 1, 1, None)) == math.inf


def test_the_link_as_a_queueing_centre_caps_throughput():
    t = link_terms(1e6, servers=1, pull_every=1, bandwidth_bytes_per_s=1e7)  # 0.1 s a push and a pull
    centres = link_centres(t)
    assert [c.name for c in centres] == ["link_in", "link_out"]
    res = solve_mva(centres, think_s=0.2, customers=64)
    # However many workers, a link moves at most one push's slice every 0.1 s; many workers get close.
    assert max(res.throughput_per_s) <= 1 / 0.1 + 1e-9 and res.throughput_per_s[64] > 0.95 / 0.1
    assert res.throughput_per_s[1] == pytest.approx(1 / (0.2 + 0.1 + 0.1))
