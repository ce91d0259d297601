"""The report's network figures: the section naming the link figures, and the shaped-link series."""

import numpy as np
import pandas as pd

from testbed.report.plots import shaped_link_rate
from testbed.report.sections import network_section


def manifest(*networks, nodes=1):
    return {"configs": [{"config_id": f"c{i}", "network": n} for i, n in enumerate(networks)],
            "cluster": [{"node": f"n{i}", "ip": "x", "cpus": 2.0} for i in range(nodes)]}


def test_unshaped_runs_have_no_network_section():
    assert network_section(manifest({"bandwidth": None, "latency": 0.0, "same_node": {}}, None)) == []


def test_section_states_each_distinct_figure_and_the_single_node_rule():
    shaped = {"bandwidth": 1e9, "latency": 0.0005, "same_node": {"bandwidth": None, "latency": 0.0}}
    text = "\n".join(network_section(manifest(shaped, shaped, {"bandwidth": 1e10, "latency": 0.0})))
    assert "between nodes: 1 Gbit/s, latency 0.5 ms; same node: unshaped (2 configs)" in text
    assert "between nodes: 10 Gbit/s; same node: unshaped (1 config)" in text
    assert "emulated as a node of its own" in text
    assert "same-node figures" in "\n".join(network_section(manifest(shaped, nodes=3)))


def test_shaped_link_rate_spreads_each_transfers_bytes_over_its_duration():
    ms = 1_000_000
    events = pd.DataFrame({"node": ["a", "a", "b"], "phase": ["link_in", "link_out", "link_in"],
                           "start_ns": [0, 50 * ms, 0], "duration_ns": [100 * ms, 100 * ms, 10 * ms],
                           "bytes": [1_000_000, 2_000_000, 5]})
    times = np.array([0, 50, 100, 150, 200]) * ms
    rate = shaped_link_rate(times, events, "a")
    # 10 MB/s from the first, 20 MB/s from the second over its 100 ms
    np.testing.assert_allclose(rate, [0, 10e6, 30e6, 20e6, 0])
    assert not shaped_link_rate(times, events[events.phase == "push"], "a").any()
