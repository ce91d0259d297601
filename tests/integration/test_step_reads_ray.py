"""Real Ray, real disk: the step-read calibration measures paused reads in an actor and
produces the curves the read term reads."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from testbed.calibration.reads import PAUSES_S, SIZES_BYTES, measure_step_reads
from testbed.data.dataset import MEMORY_FS_TYPES, fs_type
from testbed.model.reads import READ_ORDERS

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def disk_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("reads")
    kind = fs_type(path)
    if kind in MEMORY_FS_TYPES:
        pytest.skip(f"the temporary folder is on {kind}, a memory-backed file system: nothing reaches a disk")
    return path


@pytest.fixture(scope="module")
def measured(ray_local, disk_dir):
    return measure_step_reads(str(disk_dir))


def test_the_calibration_measures_every_order_pause_and_size(measured, disk_dir):
    assert measured.orders() == tuple(sorted(READ_ORDERS))
    for order in READ_ORDERS:
        pauses = [c.pause_s for c in measured.curves if c.order == order]
        assert pauses == [0.0, *PAUSES_S]
        for curve in (c for c in measured.curves if c.order == order):
            assert [b for b, _ in curve.read_s.points] == list(SIZES_BYTES)
            assert all(s > 0 and math.isfinite(s) for _, s in curve.read_s.points)
    # the reads bypassed the page cache, in the data directory, and left no file behind
    assert measured.source == "testbed-reader in an actor (o_direct)"
    assert measured.directory == str(disk_dir) and list(disk_dir.iterdir()) == []


def test_a_paused_read_is_never_predicted_below_the_back_to_back_one(measured):
    for order in READ_ORDERS:
        for nbytes in SIZES_BYTES:
            hot = measured.read_s(order, nbytes, 0.0)
            assert all(measured.read_s(order, nbytes, p) >= hot for p in PAUSES_S)
        # a step's read of 8 random samples: one after the pause, seven back to back
        step = measured.step_read_s(order, 4096, 8, 0.02)
        assert step >= measured.read_s(order, 4096, 0.02)


def test_the_readers_own_work_per_step_is_measured_and_smaller_than_a_read(measured):
    # a step read draws its positions and builds its plan once, whatever its minibatch: part of
    # a single sample's read, not of a random minibatch's later samples
    # (Not "strictly between 0 and a read": it is the difference of two back-to-back streams'
    # means, and on 2026-12-07 this VM's per-call and syscall costs moved 2-3x within minutes,
    # so one calibration can read it at either bound; docs/model.md.)
    single = measured.read_s("random", 4096, 0.0)
    assert math.isfinite(measured.step_overhead_s) and 0.0 <= measured.step_overhead_s <= 2 * single
    assert measured.step_read_s("random", 4096, 8, 0.0) <= 8 * single * (1 + 1e-9)
