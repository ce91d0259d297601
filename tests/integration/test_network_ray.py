"""Shaped links on real Ray: a push at 1 Gbit takes its bytes' time on the link, and four
workers into one shard share its inbound link without exceeding its bandwidth.

The bounds are the shaping's own: a transfer can't cross a link faster than its share (the
lower bounds hold on a loaded machine too); the upper bounds are loose, since a loaded
machine wakes a waiting thread late. The tight figures are in the benchmarks' notes
(docs/network.md)."""

import numpy as np
import pandas as pd
import pytest

from testbed.bench.network import busy_union_s
from testbed.config.spec import expand, parse_spec
from testbed.runner.run import run_config

pytestmark = pytest.mark.integration

MIB16 = 16 * 2**20
GBIT_BYTES_PER_S = 1e9 / 8


def config(**fields):
    base = {"name": "net", "seed": 3, "workload": {"steps": 5}, "gradient_bytes": "16MiB",
            "compute": {"mode": "sleep", "seconds": "20ms"}, "pull_every": 5}
    base.update(fields)
    return expand(parse_spec(base))[0]


def events(cfg):
    return pd.DataFrame(run_config(cfg, 0, "net-test").columns)


@pytest.fixture(scope="module")
def one_worker(ray_local):
    return events(config()), events(config(network={"bandwidth": "1Gbit"}))


def test_one_shaped_push_takes_its_bytes_over_the_link_on_top_of_the_unshaped_push(one_worker):
    plain, shaped = one_worker
    wire_s = MIB16 / GBIT_BYTES_PER_S  # 134 ms
    assert not (plain.phase == "link_in").any()
    link_in = shaped[shaped.phase == "link_in"].duration_ns.to_numpy() / 1e9
    assert len(link_in) == 5 and link_in.min() >= 0.99 * wire_s and link_in.max() <= 1.5 * wire_s
    pushes = lambda ev: ev[(ev.phase == "push") & (ev.step > 0)].duration_ns.mean() / 1e9  # noqa: E731
    excess = pushes(shaped) - pushes(plain)
    assert 0.9 * wire_s <= excess <= 1.5 * wire_s
    # the due pull at the last step crosses the outbound link
    link_out = shaped[shaped.phase == "link_out"]
    assert len(link_out) == 1 and link_out.duration_ns.iloc[0] / 1e9 >= 0.99 * wire_s
    pull = shaped[(shaped.phase == "pull")].duration_ns.iloc[0]
    assert pull >= link_out.duration_ns.iloc[0]


def test_four_workers_share_the_shards_inbound_link_within_its_bandwidth(ray_local):
    ev = events(config(workers=4, network={"bandwidth": "1Gbit"}))
    link_in = ev[ev.phase == "link_in"]
    assert len(link_in) == 4 * 5 and (link_in.bytes == MIB16).all()
    rate = link_in.bytes.sum() / busy_union_s(link_in.start_ns, link_in.duration_ns)
    assert rate <= 1.05 * GBIT_BYTES_PER_S
    assert rate >= 0.5 * GBIT_BYTES_PER_S  # the link was shared, not idle
    # pushes that overlapped took longer than one alone: the link was shared
    assert np.max(link_in.duration_ns) / 1e9 >= 1.5 * MIB16 / GBIT_BYTES_PER_S


def test_latency_alone_adds_to_every_transfer(ray_local):
    ev = events(config(gradient_bytes="64KiB", network={"latency": "30ms"}))
    link_in = ev[ev.phase == "link_in"].duration_ns.to_numpy() / 1e9
    assert len(link_in) == 5 and link_in.min() >= 0.03
    push = ev[ev.phase == "push"].duration_ns.to_numpy() / 1e9
    assert push.min() >= 0.03
