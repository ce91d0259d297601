import pytest

from testbed.config.errors import UserError
from testbed.config.spec import expand, parse_spec
from testbed.runner.guard import check_memory, config_memory_bytes


def test_refuses_a_gradient_too_large_for_memory_with_numbers():
    cfgs = expand(parse_spec({"name": "t", "workload": {"steps": 1}, "gradient_bytes": "4GiB", "workers": 4}))
    with pytest.raises(UserError) as err:
        check_memory(cfgs, available_bytes=8 * 2**30)
    msg = str(err.value)
    assert "needs about" in msg and "GiB" in msg and "lower gradient_bytes or workers" in msg


def test_accepts_what_fits():
    cfgs = expand(parse_spec({"name": "t", "workload": {"steps": 1}, "gradient_bytes": "1MiB", "workers": 4}))
    check_memory(cfgs, available_bytes=8 * 2**30)
    assert config_memory_bytes(cfgs[0]) == 14 * 2**20
