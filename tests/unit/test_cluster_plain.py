"""Where a Ray session goes and how a local one starts, without starting Ray."""

import pytest

from testbed.config.errors import UserError
from testbed.runner.cluster import LOOPBACK, local_init_options, resolve_address


def test_address_then_ray_address_then_local():
    env = {"RAY_ADDRESS": "10.0.0.1:6379"}
    assert resolve_address("10.0.0.2:6379", env) == "10.0.0.2:6379"
    assert resolve_address(None, env) == "10.0.0.1:6379"
    assert resolve_address(None, {}) is None
    assert resolve_address(None, {"RAY_ADDRESS": "  "}) is None
    assert resolve_address("local", env) is None  # a fresh local instance, whatever the environment says
    assert resolve_address(None, {"RAY_ADDRESS": "auto"}) == "auto"


def test_a_dashboard_url_in_ray_address_is_refused_in_one_line():
    with pytest.raises(UserError, match="dashboard address") as err:
        resolve_address(None, {"RAY_ADDRESS": "http://10.0.0.1:8265"})
    assert "6379" in str(err.value)


def test_a_local_instance_is_new_bounded_without_dashboard_on_loopback():
    opts = local_init_options(num_cpus=2, object_store_bytes=200 * 2**20)
    assert opts == {"address": "local", "num_cpus": 2, "object_store_memory": 200 * 2**20,
                    "include_dashboard": False, "_node_ip_address": LOOPBACK}
    assert local_init_options(object_store_bytes=1)["object_store_memory"] == 128 * 2**20  # Ray's floor


def test_ray_init_is_called_in_one_place_only(repo):
    callers = sorted(str(p.relative_to(repo)) for p in [*repo.glob("testbed/**/*.py"), *repo.glob("actors/*.py"),
                                                        *repo.glob("tests/**/*.py")]
                     if "ray.init(" in p.read_text() and p.name != "test_cluster_plain.py")
    assert callers == ["testbed/runner/cluster.py"]


def test_a_cluster_reached_but_not_joined_points_at_the_token():
    from testbed.runner.cluster import _join_error
    err = ConnectionError("Failed to connect to Ray cluster at 10.0.0.1:6379")
    assert "export RAY_AUTH_MODE=token" in str(_join_error("10.0.0.1:6379", err, {}))
    plain = str(_join_error("10.0.0.1:6379", err, {"RAY_AUTH_MODE": "token"}))
    assert "no Ray cluster answers at '10.0.0.1:6379'" in plain and "leave out --address" in plain
