"""A sweep above the limit is refused unless asked for, with its estimated run time."""

import pytest

from testbed.config.errors import UserError
from testbed.config.spec import expand, parse_spec
from testbed.config.sweep_size import LARGE_SWEEP_RUNS, check_sweep_size, config_runs, lower_bound_run_s


def spec(**fields):
    return parse_spec({"name": "t", "workload": {"steps": 100}, "compute": {"seconds": "10ms"}, **fields})


def test_a_sweep_within_the_limit_passes_silently():
    assert check_sweep_size(spec(sweep={"workers": [1, 2, 4]}), large_sweep=False) == ""


def test_a_large_sweep_is_refused_with_its_estimate():
    big = spec(repeats=3, sweep={"seed": list(range(200))})
    assert config_runs(big) == 600 > LARGE_SWEEP_RUNS
    with pytest.raises(UserError, match="--large-sweep") as err:
        check_sweep_size(big, large_sweep=False)
    msg = str(err.value)
    # 600 runs x 100 steps x 10 ms = 600 s
    assert "600 config runs (200 configs x 3 repeats)" in msg and "at least 600 s" in msg
    assert "600 s" in check_sweep_size(big, large_sweep=True)


def test_the_estimate_takes_the_shards_applies_when_they_are_longer():
    cfgs = expand(spec(workers=4, servers=2, apply_seconds="20ms", compute={"seconds": "1ms"}))
    # per step: 4 workers' slices of 20 ms / 2 shards, one after another = 40 ms > 1 ms
    assert lower_bound_run_s(cfgs, repeats=2) == pytest.approx(2 * 100 * 0.04)


def test_matmul_compute_is_not_guessed():
    cfgs = expand(spec(compute={"mode": "matmul", "flops": 1e9}))
    assert lower_bound_run_s(cfgs, repeats=1) == 0.0
