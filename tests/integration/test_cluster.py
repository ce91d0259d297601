"""Several Ray nodes on one machine (``ray.cluster_utils.Cluster``): placement, per-node
services, the run folder of a cluster run. Asserts structure, never times."""

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from testbed.config.errors import UserError
from testbed.config.spec import expand, load_spec, parse_spec
from testbed.records.rundir import RUN_FOLDER_ENTRIES, RunFolder
from testbed.report.writer import write_report
from testbed.runner.cluster import ray_session
from testbed.runner.nodes import alive_nodes, prepare_on_nodes
from testbed.runner.run import run_config, run_experiment

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NODES = 3
_NODE_ARGS = {"num_cpus": 1, "object_store_memory": 100 * 2**20}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster():
    """A head and two more nodes, one CPU each; the test process is its driver."""
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    # A free GCS port and a random dashboard-agent port: other Ray instances may run on this machine.
    head = dict(_NODE_ARGS, include_dashboard=False, gcs_server_port=_free_port(), dashboard_agent_listen_port=None)
    c = Cluster(initialize_head=True, head_node_args=head)
    try:
        for _ in range(NODES - 1):
            c.add_node(**_NODE_ARGS)
        c.wait_for_nodes()
        # Joined as the testbed joins a cluster, but without shipping the code: the actors
        # must import this checkout (the first test checks it).
        with ray_session(c.address, ship_code=False, logging_level=logging.ERROR):
            yield c
    finally:
        ray.shutdown()
        c.shutdown()


def make_spec(**fields):
    base = {"name": "cl", "seed": 3, "workload": {"steps": 4}, "gradient_bytes": "16KiB",
            "compute": {"mode": "sleep", "seconds": "5ms"}}
    base.update(fields)
    return parse_spec(base)


def test_the_cluster_has_three_nodes_and_actors_import_this_checkout(cluster):
    import ray
    nodes = alive_nodes()
    assert len(nodes) == NODES and all(n.cpus == 1 for n in nodes)

    @ray.remote(num_cpus=0)
    def where():
        import testbed
        return os.path.dirname(os.path.dirname(testbed.__file__))

    import testbed
    assert ray.get(where.remote()) == os.path.dirname(os.path.dirname(testbed.__file__))


def test_strict_spread_puts_one_worker_per_node(cluster):
    cfg = expand(make_spec(workers=NODES, servers=2, placement={"strategy": "strict_spread"}))[0]
    out = run_config(cfg, 0, "run-strict")
    worker_nodes = [out.nodes[f"worker-{i}"]["node"] for i in range(NODES)]
    assert len(set(worker_nodes)) == NODES
    ev = pd.DataFrame(out.columns)
    assert ev.node.nunique() >= NODES
    for actor, ident in out.nodes.items():  # each event carries the node its actor reported
        assert set(ev[ev.actor == actor].node) == {ident["node"]}
        assert ident["ip"]
    assert sum(out.worker_steps) == NODES * cfg.steps


def test_a_worker_on_its_shards_node_takes_the_same_node_link_the_others_the_network(cluster):
    """One worker per node and one shard: the worker beside the shard gets the same_node figures
    (a 30 ms latency), the other two the network's (100 Mbit: ~1.3 ms for 16 KiB, no latency)."""
    cfg = expand(make_spec(workers=NODES, servers=1, placement={"strategy": "strict_spread"},
                           network={"bandwidth": "100Mbit", "same_node": {"latency": "30ms"}}))[0]
    out = run_config(cfg, 0, "run-links")
    shard_node = out.nodes["server-0"]["node"]
    near = [i for i in range(NODES) if out.nodes[f"worker-{i}"]["node"] == shard_node]
    assert len(near) == 1
    ev = pd.DataFrame(out.columns)
    pushes = {i: ev[(ev.actor == f"worker-{i}") & (ev.phase == "push")].duration_ns / 1e9 for i in range(NODES)}
    assert pushes[near[0]].min() >= 0.03
    for i in set(range(NODES)) - set(near):
        assert pushes[i].median() < 0.03
    assert len(ev[ev.phase == "link_in"]) == NODES * cfg.steps


def test_servers_own_node_keeps_workers_off_it(cluster):
    cfg = expand(make_spec(workers=4, servers=2, placement={"strategy": "spread", "servers_own_node": True}))[0]
    out = run_config(cfg, 0, "run-own")
    server_nodes = {out.nodes[f"server-{j}"]["node"] for j in range(2)}
    worker_nodes = {out.nodes[f"worker-{i}"]["node"] for i in range(4)}
    assert len(server_nodes) == 1
    assert not server_nodes & worker_nodes
    assert len(worker_nodes) == NODES - 1


def test_placement_groups_are_removed_after_each_config(cluster):
    from ray.util import placement_group_table
    cfg = expand(make_spec(workers=2))[0]
    run_config(cfg, 0, "run-pg")
    states = [pg["state"] for pg in placement_group_table().values()]
    assert states and all(s == "REMOVED" for s in states)


def test_an_impossible_placement_fails_before_running(cluster, tmp_path):
    spec = make_spec(workers=NODES + 1, placement={"strategy": "strict_spread"})
    with pytest.raises(UserError, match="needs 4 nodes"):
        run_experiment(spec, out=tmp_path / "run")
    assert RunFolder.open(tmp_path / "run").manifest["status"] == "failed"


def node_tagger():
    """A stand-in for the data-set writer that says which node ran it. Made in a function so
    that Ray pickles it by value (the test module is not importable on the nodes)."""
    def tag(node: str) -> str:
        import ray
        return f"{node} ran on {ray.get_runtime_context().get_node_id()}"
    return tag


def test_data_is_prepared_on_every_worker_node_or_once_when_shared(cluster):
    nodes = [n.node for n in alive_nodes()]
    local = prepare_on_nodes(node_tagger(), nodes + nodes[:1], shared=False)
    assert local == {n: f"{n} ran on {n}" for n in nodes}
    shared = prepare_on_nodes(node_tagger(), nodes, shared=True)
    assert list(shared) == nodes[:1]


def test_run_config_prepares_data_where_workers_land_and_they_read_it(cluster, tmp_path):
    cfg = expand(make_spec(workers=NODES, placement={"strategy": "strict_spread"},
                           workload={"steps": 2, "dataset_bytes": "3MiB"},
                           data={"dir": str(tmp_path / "data"), "file_bytes": "1MiB"}))[0]
    out = run_config(cfg, 0, "run-data")
    worker_nodes = {out.nodes[f"worker-{i}"]["node"] for i in range(NODES)}
    assert set(out.prepared) == worker_nodes
    assert all(info.node_tag == node and info.total_bytes == 3 * 2**20 for node, info in out.prepared.items())
    reads = [(a, b) for a, p, b in zip(out.columns["actor"], out.columns["phase"], out.columns["bytes"])
             if p == "init_read"]
    assert sorted(a for a, _ in reads) == [f"worker-{i}" for i in range(NODES)]
    assert sum(b for _, b in reads) == 3 * 2**20  # the shards of the data set, each read once


@pytest.fixture(scope="module")
def cluster_run(cluster, tmp_path_factory):
    spec = load_spec(REPO / "experiments" / "cluster_smoke.yaml",
                     overrides=["workload.steps=4", "compute.seconds=5ms", "sweep.workers=[3]"])
    path = tmp_path_factory.mktemp("cluster") / "run"
    return run_experiment(spec, out=path, monitor_interval_s=0.05)


def test_cluster_run_folder_has_every_record(cluster_run):
    folder = RunFolder.open(cluster_run.path)
    manifest = folder.manifest
    assert manifest["status"] == "complete"
    nodes = {n["node"] for n in manifest["cluster"]}
    assert len(nodes) == NODES
    assert set(manifest["clock_offsets"]) == nodes
    events = folder.events()
    assert events.node.nunique() == NODES
    resources = folder.resources()
    assert set(resources.node) == nodes  # the monitor reported every node
    assert (resources.cpu_percent.between(0, 100)).all()
    # Linux reports the hypervisor's steal: a share, on every sample whose CPU counters had ticked
    # (every 10 ms) since the monitor started the config
    steal = resources.cpu_steal_percent
    assert steal.notna().mean() > 0.9 and steal.dropna().between(0, 100).all()
    assert set(resources.config_id) == set(events.config_id)


def test_trace_has_a_process_per_node_and_events_for_every_actor(cluster_run):
    trace = json.loads((cluster_run.path / "trace.json").read_text())["traceEvents"]
    events = cluster_run.events()
    processes = {e["pid"] for e in trace if e["ph"] == "M" and e["name"] == "process_name"}
    assert len(processes) == NODES
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace if e["name"] == "thread_name"}
    complete = [e for e in trace if e["ph"] == "X"]
    assert len(complete) == len(events)
    named = {threads[(e["pid"], e["tid"])] for e in complete}
    assert named == set(events.actor)


def test_cluster_run_folder_has_the_local_shape_and_report_reads_it(cluster_run):
    # test_run_local checks the same set for a local run folder.
    assert {p.name for p in cluster_run.path.iterdir()} == set(RUN_FOLDER_ENTRIES)
    report = write_report(cluster_run.path)
    text = report.read_text()
    assert "## Nodes" in text and "## Clocks" in text and "at most" in text
    assert (cluster_run.path / "utilisation.png").stat().st_size > 0
    for node in {n["node"] for n in cluster_run.manifest["cluster"]}:
        assert node[:12] in text


def test_a_cli_run_connects_to_the_cluster_and_ships_the_code(cluster, repo, tmp_path):
    out = tmp_path / "cli"
    r = subprocess.run([sys.executable, "-m", "testbed", "run", str(repo / "experiments" / "cluster_smoke.yaml"),
                        "--address", cluster.address, "--out", str(out), "--set", "workload.steps=2",
                        "--set", "sweep.workers=[3]"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete" and len(manifest["nodes"]) == NODES
    (out / "report.md").unlink()
    r = subprocess.run([sys.executable, "-m", "testbed", "report", str(out)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "## Nodes" in (out / "report.md").read_text()


def test_an_address_where_nothing_answers_fails_fast(tmp_path):
    port = _free_port()  # bound and closed just now: nothing listens there
    t0 = time.monotonic()
    with pytest.raises(UserError, match=f"no Ray cluster answers at 127.0.0.1:{port}"):
        run_experiment(make_spec(), out=tmp_path / "run", address=f"127.0.0.1:{port}")
    assert time.monotonic() - t0 < 10
    assert not (tmp_path / "run").exists()
