"""Real disk, real fio: the cache bypass is real, fio runs and parses, calibration and its fallback."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import psutil
import pytest

from testbed.calibration.disk import calibrate_disk, load_disk_profile
from testbed.config.spec import Data
from testbed.data.dataset import MEMORY_FS_TYPES, fs_type, prepare_dataset, write_random_file
from testbed.data.diskio import DirectReader, init_read_plan
from testbed.data.fio import FioJob, FioNotFound, run_job

pytestmark = pytest.mark.integration
MiB = 2**20


@pytest.fixture
def disk_dir(tmp_path: Path) -> Path:
    kind = fs_type(tmp_path)
    if kind in MEMORY_FS_TYPES:
        pytest.skip(f"tmp_path is on {kind}, a memory-backed file system: nothing reaches a disk")
    return tmp_path


def _disk_read_bytes() -> int:
    return psutil.Process().io_counters().read_bytes


def _read_twice(path: str, nbytes: int) -> list[int]:
    """Bytes the kernel fetched from the block device for each of two full reads."""
    grown = []
    with DirectReader(MiB) as reader:
        for _ in range(2):
            before = _disk_read_bytes()
            assert reader.read_plan([(path, 0, nbytes)]) == nbytes
            grown.append(_disk_read_bytes() - before)
    return grown


def test_o_direct_reads_reach_the_disk_every_time(disk_dir: Path) -> None:
    path = disk_dir / "twice.bin"
    write_random_file(path, 16 * MiB, seed=1)
    assert all(g >= 16 * MiB for g in _read_twice(str(path), 16 * MiB))


def test_the_fadvise_fallback_reaches_the_disk_every_time(disk_dir: Path, no_o_direct) -> None:
    path = disk_dir / "twice.bin"
    write_random_file(path, 16 * MiB, seed=2)
    assert all(g >= 16 * MiB for g in _read_twice(str(path), 16 * MiB))


def test_plain_reads_of_a_written_file_would_have_hit_the_cache(disk_dir: Path) -> None:
    """The control: without the bypass the second read is served from RAM, so the tests above
    measure something that can fail."""
    path = disk_dir / "cached.bin"
    write_random_file(path, 16 * MiB, seed=3)
    with open(path, "rb") as f:
        f.read()
        before = _disk_read_bytes()
        f.seek(0)
        f.read()
    assert _disk_read_bytes() - before < 4 * MiB


def test_init_plans_over_a_prepared_data_set_read_every_byte_once(disk_dir: Path) -> None:
    data = Data(dir=str(disk_dir), file_bytes=4 * MiB)
    info = prepare_dataset(data, 10 * MiB)
    with DirectReader(data.block_bytes, info.cache_bypass) as reader:
        before = _disk_read_bytes()
        got = [reader.read_plan(init_read_plan(info.files, 10 * MiB, i, 3, "shard")) for i in range(3)]
        assert sum(got) == 10 * MiB
        assert _disk_read_bytes() - before >= 10 * MiB


@pytest.fixture
def fio_path() -> str:
    found = shutil.which("fio")
    if found is None:
        pytest.skip("fio is not installed (apt-get install fio); .ci/run installs it")
    return found


def test_a_real_fio_run_on_a_small_file(disk_dir: Path, fio_path: str) -> None:
    write_random_file(disk_dir / "small.bin", 8 * MiB, seed=4)
    job = FioJob("seq", "read", MiB, "small.bin", 4 * MiB, numjobs=2, offset_increment_bytes=4 * MiB,
                 runtime_s=0.5)
    result = run_job(job, disk_dir, timeout_s=60, fio=fio_path)
    assert result.numjobs == 2 and result.read_bytes_per_s > 1e6 and result.read_bytes >= MiB
    assert result.clat_percentiles_s["p50"] > 0


def test_calibration_with_fio(disk_dir: Path, fio_path: str) -> None:
    out = disk_dir / "out" / "disk.json"
    messages: list[str] = []
    profile = calibrate_disk(disk_dir / "cal", out, max_jobs=3, file_bytes=12 * MiB, sample_bytes=6000,
                             runtime_s=0.3, progress=messages.append)
    assert profile.source == "fio" and profile.fs_type not in MEMORY_FS_TYPES
    assert sorted(profile.seq_read_bytes_per_s) == [1, 2, 3]
    assert sorted(profile.rand_read_iops) == [4096, 6000] and all(v > 0 for v in profile.rand_read_iops.values())
    assert 0 < profile.latency_s["p50"] <= profile.latency_s["p99"]
    assert load_disk_profile(out) == profile
    assert list((disk_dir / "cal").iterdir()) == []  # the calibration file is gone
    assert any("sequential read, 3 concurrent" in m for m in messages)
    # the first reads after idle, by the testbed's reader on the same file: a figure >= 0
    assert any("first reads after idle (7 x" in m for m in messages) and profile.read_start_s >= 0.0
    # random 4 KiB reads by 2 and 3 fio jobs at once, the single reader's figure at 1
    assert sorted(profile.rand_read_iops_by_readers) == [1, 2, 3]
    assert profile.rand_read_iops_by_readers[1] == profile.rand_read_iops[4096]
    assert all(v > 0 for v in profile.rand_read_iops_by_readers.values())
    assert len(profile.random_rate_multipliers()) == 3 and profile.random_rate_multipliers()[0] == 1.0


def test_calibration_falls_back_to_the_reader_without_fio(disk_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("PATH", str(disk_dir / "empty"))  # fio is not on this PATH
    with caplog.at_level(logging.WARNING, logger="testbed.calibration.disk"):
        profile = calibrate_disk(disk_dir, max_jobs=2, file_bytes=8 * MiB, runtime_s=0.2)
    assert profile.source == "testbed-reader"
    assert sorted(profile.seq_read_bytes_per_s) == [1, 2] and profile.rand_read_iops[4096] > 0
    # the reader's threads read at random two at once, as two workers do
    assert sorted(profile.rand_read_iops_by_readers) == [1, 2] and profile.rand_read_iops_by_readers[2] > 0
    assert "apt-get install fio" in caplog.text
    with pytest.raises(FioNotFound):
        calibrate_disk(disk_dir, max_jobs=1, file_bytes=MiB, runtime_s=0.1, require_fio=True)
    assert not list(disk_dir.glob(".calibrate-*"))


def test_calibration_with_the_reader_by_choice(disk_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    profile = calibrate_disk(disk_dir, max_jobs=1, file_bytes=4 * MiB, runtime_s=0.1, method="reader")
    assert profile.source == "testbed-reader" and profile.seq_read_bytes_per_s[1] > 0
    assert "apt-get" not in caplog.text  # a choice, not a fallback: no warning


def test_the_reader_and_fio_measure_one_file_written_once(disk_dir: Path, fio_path: str) -> None:
    said: list[str] = []
    target = disk_dir / "shared"
    kept = calibrate_disk(target, max_jobs=2, file_bytes=8 * MiB, runtime_s=0.1, method="reader",
                          progress=said.append, file_name="one.bin", keep_file=True)
    path = target / "one.bin"
    assert kept.source == "testbed-reader" and path.stat().st_size == 8 * MiB
    ref = calibrate_disk(target, max_jobs=2, file_bytes=8 * MiB, runtime_s=0.1, method="fio",
                         progress=said.append, file_name="one.bin")
    assert ref.source == "fio" and ref.seq_read_bytes_per_s[1] > 0
    assert sum(line.startswith("writing a") for line in said) == 1  # the second read what the first wrote
    assert not path.exists()  # and, not asked to keep it, removed it


def test_first_reads_after_idle_reach_the_disk(disk_dir: Path) -> None:
    # Seven first reads by new readers after a pause each, on a real disk with the page cache
    # bypassed: a time for every extent, each one a real read (more than 0), and their start
    # against a plausible rate a finite figure >= 0.
    from testbed.data.diskio import START_BYTES, first_read_times, read_start_s
    path = disk_dir / "first.bin"
    write_random_file(path, 16 * MiB, seed=3)
    extents = [(str(path), k * 2 * MiB, START_BYTES) for k in range(7)]
    times = first_read_times(extents, MiB, cache_bypass=True, pause_s=0.02)
    assert len(times) == 7 and all(t > 0 for t in times)
    start = read_start_s(times, START_BYTES, 3e9)
    assert 0.0 <= start < 1.0
