"""Placement plans: pure, no Ray."""

import pytest

from testbed.config.errors import UserError
from testbed.config.spec import Placement
from testbed.runner.cluster import runtime_env
from testbed.runner.placement import cpu_per_actor, plan_placement


def plan(strategy, servers, workers, nodes, own=False, cpus=1.0):
    return plan_placement(Placement(strategy=strategy, servers_own_node=own), servers, workers, nodes, cpus)


def test_pack_has_one_small_bundle_per_actor():
    p = plan("pack", 2, 3, 1)
    assert p.strategy == "PACK"
    assert p.bundles == ({"CPU": 0.01},) * 5
    assert p.server_bundle == (0, 1) and p.worker_bundle == (2, 3, 4)


def test_strict_spread_gives_each_worker_a_bundle_and_deals_the_shards_over_them():
    p = plan("strict_spread", 3, 2, 2)
    assert p.strategy == "STRICT_SPREAD"
    assert p.worker_bundle == (0, 1) and p.server_bundle == (0, 1, 0)
    assert p.bundles == ({"CPU": 0.03}, {"CPU": 0.02})


@pytest.mark.parametrize("strategy,workers,nodes,worker_bundle", [
    ("pack", 3, 2, (1, 1, 1)),
    ("spread", 5, 3, (1, 2, 1, 2, 1)),
    ("spread", 1, 5, (1,)),
    ("strict_spread", 2, 3, (1, 2)),
])
def test_servers_own_node_puts_every_shard_in_bundle_zero(strategy, workers, nodes, worker_bundle):
    p = plan(strategy, 2, workers, nodes, own=True)
    assert p.strategy == "STRICT_SPREAD"
    assert p.server_bundle == (0, 0)
    assert p.worker_bundle == worker_bundle
    assert len(p.bundles) == max(worker_bundle) + 1


@pytest.mark.parametrize("strategy,own,workers,nodes,needed", [
    ("strict_spread", False, 4, 3, 4),
    ("strict_spread", True, 3, 3, 4),
    ("pack", True, 1, 1, 2),
    ("spread", True, 8, 1, 2),
])
def test_a_placement_the_cluster_cannot_hold_is_a_user_error(strategy, own, workers, nodes, needed):
    with pytest.raises(UserError, match=f"needs {needed} nodes with CPUs, the cluster has {nodes}"):
        plan(strategy, 1, workers, nodes, own=own)


def test_many_actors_share_a_small_node_with_smaller_slices():
    assert cpu_per_actor(10, 2.0) == 0.01
    assert cpu_per_actor(4096 + 256, 2.0) == 0.0002
    assert cpu_per_actor(10**6, 1.0) == 0.0001  # Ray's smallest unit
    p = plan("pack", 1, 4096, 1, cpus=2.0)
    assert sum(b["CPU"] for b in p.bundles) <= 1.0


def test_the_packages_are_shipped_except_inside_a_submitted_job():
    env = runtime_env({})
    assert [m.__name__ for m in env["py_modules"]] == ["testbed", "actors"]
    assert runtime_env({"RAY_JOB_CONFIG_JSON_ENV_VAR": "{}"}) is None
