"""The disk's first read after idle (``DiskProfile.read_start_s``): the pure figure, the
measurement's protocol (a pause, then a new reader, per extent), and the profile field."""

from __future__ import annotations

import dataclasses

import pytest

from testbed.data.diskio import START_PAUSE_S, first_read_times, read_start_s
from testbed.model.profile import DiskProfile

MiB = 2**20


def test_the_start_is_the_median_first_read_less_its_bytes_at_the_rate():
    # 2 MiB at 2 GB/s is 1.048576 ms; the median of the reads 1.6 ms
    assert read_start_s([0.0016, 0.0015, 0.0030], 2 * MiB, 2e9) == pytest.approx(0.0016 - 2 * MiB / 2e9)
    assert read_start_s([0.0015, 0.0017], 2 * MiB, 2e9) == pytest.approx(0.0016 - 2 * MiB / 2e9)
    # never below 0 (reads faster than the rate), 0 with nothing measured or no rate
    assert read_start_s([0.0005], 2 * MiB, 2e9) == 0.0
    assert read_start_s([], 2 * MiB, 2e9) == 0.0 and read_start_s([0.002], 2 * MiB, 0.0) == 0.0


def test_each_first_read_comes_after_a_pause_with_a_new_reader(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(bytes(range(256)) * (4 * MiB // 256))
    calls = []
    ticks = iter(range(100))

    def sleep(s: float) -> None:
        calls.append(("sleep", s))

    def clock() -> float:
        calls.append(("clock", None))
        return float(next(ticks))

    extents = [(str(path), 0, MiB), (str(path), 2 * MiB, MiB), (str(path), MiB, 512 * 1024)]
    times = first_read_times(extents, MiB, cache_bypass=False, sleep=sleep, clock=clock)
    assert times == [1.0, 1.0, 1.0]  # one clock pair around each read
    # pause, start, stop: for every extent, the pause before the clock starts
    assert [c[0] for c in calls] == ["sleep", "clock", "clock"] * 3
    assert all(s == START_PAUSE_S for kind, s in calls if kind == "sleep")


def test_the_profile_field_defaults_to_nothing_measured_and_refuses_a_negative_start():
    disk = DiskProfile(seq_read_bytes_per_s={1: 2e9}, block_bytes=MiB)
    assert disk.read_start_s == 0.0  # a profile written before calibration version 27
    assert dataclasses.replace(disk, read_start_s=4e-4).read_start_s == 4e-4
    with pytest.raises(ValueError, match="read_start_s"):
        DiskProfile(seq_read_bytes_per_s={1: 2e9}, block_bytes=MiB, read_start_s=-1e-3)


def test_the_data_set_measurement_sets_the_start_and_keeps_the_calibrations_otherwise():
    from testbed.cli.validate import dataset_disk_profile
    from tests import factories
    from tests.unit.test_model_simulated import profile
    disk = DiskProfile(seq_read_bytes_per_s={1: 3e9}, block_bytes=MiB, read_start_s=2e-4)
    prof = profile(cores_per_node=2, disk=disk)
    cfg = factories.run_config()
    assert dataset_disk_profile(prof, {1: 2e9}, cfg, 6e-4).disk.read_start_s == 6e-4
    assert dataset_disk_profile(prof, {1: 2e9}, cfg).disk.read_start_s == 2e-4
