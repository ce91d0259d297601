"""Calibration's pure parts: line fits, machine identity, and the cache decision."""

import json

import pytest

from testbed.calibration.calibrate import fit_line, identity_key, machine_identity, reusable_profile
from testbed.model.profile import DiskProfile, HardwareProfile, save_profile
from testbed.records.atomic import atomic_write_text

NODES = [{"NodeManagerAddress": "10.0.0.2", "Alive": True, "Resources": {"CPU": 8.0, "memory": 30 * 2**30}},
         {"NodeManagerAddress": "10.0.0.1", "Alive": True, "Resources": {"CPU": 4.0, "memory": 14 * 2**30}},
         {"NodeManagerAddress": "10.0.0.3", "Alive": False, "Resources": {"CPU": 4.0}}]


def profile(identity):
    return HardwareProfile(identity=identity, cores_per_node=4, server_apply_bytes_per_s=5e9,
                           server_call_overhead_s=1e-4, actor_call_latency_s=5e-4, transfer_bytes_per_s_local=2e9,
                           disk=DiskProfile({1: 5e8, 2: 9e8}, block_bytes=2**20))


def test_fit_line_recovers_latency_and_bandwidth():
    sizes = [1e6, 8e6, 32e6]
    times = [5e-4 + s / 2e9 for s in sizes]
    a, b = fit_line(sizes, times)
    assert a == pytest.approx(5e-4)
    assert 1 / b == pytest.approx(2e9)
    with pytest.raises(ValueError):
        fit_line([1.0], [1.0])


def test_identity_ignores_dead_nodes_and_order():
    ident = machine_identity(NODES, "~/data")
    assert [n["ip"] for n in ident["nodes"]] == ["10.0.0.1", "10.0.0.2"]
    assert ident["nodes"][0]["cpus"] == 4
    assert identity_key(ident) == identity_key(machine_identity(list(reversed(NODES)), "~/data"))
    assert identity_key(ident) != identity_key(machine_identity(NODES, "/other"))


def test_cached_profile_is_reused_only_for_the_same_machine(tmp_path):
    ident = machine_identity(NODES, "~/data")
    path = tmp_path / "p.json"
    assert reusable_profile(path, ident) is None  # nothing cached
    save_profile(profile(ident), path, atomic_write_text)
    assert reusable_profile(path, ident) == profile(ident)
    other = machine_identity(NODES[:1], "~/data")
    assert reusable_profile(path, other) is None  # another cluster: measure again
    path.write_text("{not json")
    assert reusable_profile(path, ident) is None  # corrupt: measure again


def test_profile_round_trips_through_json(tmp_path):
    ident = machine_identity(NODES, None)
    path = save_profile(profile(ident), tmp_path / "p.json", atomic_write_text)
    data = json.loads(path.read_text())
    assert data["schema_version"] == 1 and data["disk"]["seq_read_bytes_per_s"] == {"1": 5e8, "2": 9e8}
