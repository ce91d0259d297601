"""Stragglers in the model: hand-computed cases."""

import functools

import pytest

from testbed.model import ModelFamily, predict
from testbed.model.stragglers import straggler_compute_factor, straggler_extra_s
from tests import factories
from tests.factories import config_fields

# Fast transfers and applies (1 GB/s) and no disk: the stragglers' compute dominates.
profile = functools.partial(factories.profile, server_apply_bytes_per_s=1e9, transfer_bytes_per_s_local=1e9, disk=None)


def config(sync="async", faults=(), workers=4):
    return config_fields(workers=workers, sync=sync, gradient_bytes=4096, workload={"steps": 10}, restarts=1,
                         faults=list(faults))


SLOW = {"kind": "straggler", "worker": 1, "factor": 3.0, "from_step": 5}
SLOWER = {"kind": "straggler", "worker": 2, "factor": 5.0, "from_step": 8}


def test_async_train_ends_with_the_straggler():
    cfg = config(faults=[SLOW])
    assert straggler_extra_s(cfg, 0.01, 10, sync=False) == pytest.approx(2 * 0.01 * 5)  # (f - 1) c x 5 steps
    plain = predict(config(), profile(), ModelFamily.QUEUEING)
    slow = predict(cfg, profile(), ModelFamily.QUEUEING)
    assert slow.train_s - plain.train_s == pytest.approx(0.1)
    assert slow.total_s - plain.total_s == pytest.approx(0.1)


def test_sync_steps_pay_their_slowest_worker():
    cfg = config(sync="sync", faults=[SLOW, SLOWER])
    # steps 5-7: worker 1 is slowest (2 c extra); steps 8-9: worker 2 (4 c extra)
    assert straggler_extra_s(cfg, 0.01, 10, sync=True) == pytest.approx(3 * 0.02 + 2 * 0.04)
    # async: only the slowest worker's own extra time counts
    assert straggler_extra_s(cfg, 0.01, 10, sync=False) == pytest.approx(max(2 * 0.01 * 5, 4 * 0.01 * 2))


def test_mean_compute_is_over_every_worker_and_step():
    cfg = config(faults=[SLOW])
    assert straggler_compute_factor(cfg, 10, 4) == pytest.approx(1 + 2 * 5 / 40)
    p = predict(cfg, profile(), ModelFamily.INITIAL)
    assert p.compute_s == pytest.approx(0.01 * 1.25)


def test_no_straggler_changes_nothing():
    assert straggler_extra_s(config(), 0.01, 10, sync=False) == 0.0
    assert straggler_compute_factor(config(), 10, 4) == 1.0
