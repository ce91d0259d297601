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
    # the shard's parameters and scratch (2 G), reply buffers for its N + 4 threads, 3 G a worker
    assert config_memory_bytes(cfgs[0]) == (2 + 8 + 12) * 2**20
    # sync: the two round snapshots instead of the threads' reply buffers
    (sync,) = expand(parse_spec({"name": "t", "workload": {"steps": 1}, "gradient_bytes": "1MiB", "workers": 4,
                                 "sync": "sync"}))
    assert config_memory_bytes(sync) == (2 + 2 + 12) * 2**20


def cfgs_of(**fields):
    return expand(parse_spec({"name": "t", "workload": {"steps": 1}, **fields}))


def test_matmul_buffers_are_counted():
    from testbed.emulation.compute import matmul_size
    (plain,) = cfgs_of(workers=2)
    (mm,) = cfgs_of(workers=2, compute={"mode": "matmul", "flops": 2e12})
    n = matmul_size(2e12)
    assert config_memory_bytes(mm) - config_memory_bytes(plain) == 2 * 3 * n * n * 4


def test_a_matmul_too_large_for_memory_is_refused_naming_compute_flops():
    cfgs = cfgs_of(workers=4, compute={"mode": "matmul", "flops": 1e13})  # 3.5 GB of buffers a worker
    with pytest.raises(UserError, match="compute.flops") as err:
        check_memory(cfgs, available_bytes=8 * 2**30)
    assert "matmul" in str(err.value)


def test_events_per_step_by_role():
    from testbed.runner.guard import events_per_config
    (a,) = cfgs_of(workers=3, servers=2, workload={"steps": 10})
    # worker: compute, push, pull a step; each shard: queue and apply per update (3 x 10)
    assert events_per_config(a) == pytest.approx(3 * 10 * 3 + 2 * 3 * 10 * 2, abs=64)
    (b,) = cfgs_of(workers=3, servers=2, workload={"steps": 10}, pull_every=5)
    assert events_per_config(a) - events_per_config(b) == 3 * (10 - 2)
    (c,) = cfgs_of(workers=3, servers=2, workload={"steps": 10}, sync="sync")  # + a barrier a step
    assert events_per_config(c) - events_per_config(a) == 3 * 10


def test_the_events_of_ten_million_steps_are_refused():
    cfgs = cfgs_of(workload={"steps": 10_000_000}, compute={"seconds": 0})
    with pytest.raises(UserError, match="events") as err:
        check_memory(cfgs, available_bytes=8 * 2**30)
    assert "workload.steps" in str(err.value)


def test_the_events_of_a_whole_run_are_counted_with_its_repeats():
    cfgs = cfgs_of(workload={"steps": 200_000}, compute={"seconds": 0}, sweep={"seed": list(range(20))})
    check_memory(cfgs, available_bytes=8 * 2**30)
    with pytest.raises(UserError, match="repeats"):
        check_memory(cfgs, available_bytes=8 * 2**30, repeats=20)
