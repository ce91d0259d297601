"""Data-set generation and file-system checks, on small files under tmp_path."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import pytest

from testbed.config.errors import UserError
from testbed.config.spec import Data
from testbed.data import dataset
from testbed.data.dataset import (
    MEMORY_FS_TYPES,
    check_cache_bypass,
    dataset_dir,
    file_sizes,
    fs_type,
    mount_fs_type,
    prepare_dataset,
)
from testbed.data.diskio import DirectReader

KiB, MiB = 1024, 2**20

MOUNTS = """\
/dev/vda / ext4 rw,relatime 0 0
tmpfs /dev/shm tmpfs rw 0 0
/dev/vdb /data xfs rw 0 0
/dev/vdc /data/fast\\040disk btrfs rw 0 0
tmpfs /data/scratch tmpfs rw 0 0
"""


def _disk_tmp(tmp_path: Path) -> Path:
    if fs_type(tmp_path) in MEMORY_FS_TYPES:
        pytest.skip(f"tmp_path is on {fs_type(tmp_path)}, a memory-backed file system")
    return tmp_path


@pytest.mark.parametrize("path, expected", [
    ("/home/user/data", "ext4"),
    ("/dev/shm/x", "tmpfs"),
    ("/dev/shmx", "ext4"),            # a prefix of a mount point's name is not inside it
    ("/data", "xfs"),
    ("/data/scratch/run1", "tmpfs"),
    ("/data/fast disk/ds", "btrfs"),  # escaped space in /proc/mounts
])
def test_mount_lookup_takes_the_longest_matching_mount_point(path: str, expected: str) -> None:
    assert mount_fs_type(path, MOUNTS) == expected


def test_a_later_mount_on_the_same_point_hides_the_earlier_one() -> None:
    assert mount_fs_type("/mnt/x", "/dev/a /mnt ext4 rw 0 0\ntmpfs /mnt tmpfs rw 0 0\n") == "tmpfs"


def test_file_sizes_cut_the_last_file_short() -> None:
    assert file_sizes(10 * MiB, 4 * MiB) == [4 * MiB, 4 * MiB, 2 * MiB]
    assert file_sizes(8 * MiB, 4 * MiB) == [4 * MiB, 4 * MiB]
    assert file_sizes(0, 4 * MiB) == []


def test_prepare_writes_incompressible_files_of_the_right_sizes(tmp_path: Path) -> None:
    data = Data(dir=str(_disk_tmp(tmp_path)), file_bytes=256 * KiB)
    info = prepare_dataset(data, 600 * KiB, node_tag="n1")
    assert [Path(p).name for p, _ in info.files] == ["part-00000.bin", "part-00001.bin", "part-00002.bin"]
    assert [os.path.getsize(p) for p, _ in info.files] == [256 * KiB, 256 * KiB, 88 * KiB]
    assert info.total_bytes == 600 * KiB and info.written_bytes == 600 * KiB
    assert Path(info.directory) == dataset_dir(data, 600 * KiB) and Path(info.directory).name == "ds-614400-262144"
    assert info.cache_bypass and info.fs_type not in MEMORY_FS_TYPES and info.node_tag == "n1"
    raw = Path(info.files[0][0]).read_bytes()
    assert len(zlib.compress(raw)) > 0.99 * len(raw)
    assert raw != Path(info.files[1][0]).read_bytes()
    assert not list(Path(info.directory).glob("*.tmp"))


def test_prepare_is_idempotent_and_repairs_a_wrong_size(tmp_path: Path) -> None:
    data = Data(dir=str(_disk_tmp(tmp_path)), file_bytes=128 * KiB)
    first = prepare_dataset(data, 384 * KiB)
    stamps = [os.stat(p).st_mtime_ns for p, _ in first.files]
    again = prepare_dataset(data, 384 * KiB)
    assert again.reused and again.files == first.files
    assert [os.stat(p).st_mtime_ns for p, _ in again.files] == stamps
    truncated = first.files[1][0]
    original = Path(truncated).read_bytes()
    os.truncate(truncated, 1000)
    repaired = prepare_dataset(data, 384 * KiB)
    assert repaired.written_bytes == 128 * KiB
    assert os.path.getsize(truncated) == 128 * KiB
    # One seed per file index: the repaired file holds what the first write held.
    assert Path(truncated).read_bytes() == original


def test_prepare_refuses_without_enough_space_and_says_the_numbers(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dataset, "_disk_free_bytes", lambda _d: 100 * KiB)
    data = Data(dir=str(_disk_tmp(tmp_path)), file_bytes=64 * KiB)
    with pytest.raises(UserError) as err:
        prepare_dataset(data, 256 * KiB, node_tag="node-7")
    msg = str(err.value)
    assert "262144 bytes" in msg and "102400 bytes" in msg and "node-7" in msg and "data.dir" in msg
    assert "\n" not in msg
    assert not list(Path(dataset_dir(data, 256 * KiB)).glob("part-*"))


def test_prepare_counts_only_the_missing_bytes_against_free_space(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    data = Data(dir=str(_disk_tmp(tmp_path)), file_bytes=64 * KiB)
    prepare_dataset(data, 256 * KiB)
    monkeypatch.setattr(dataset, "_disk_free_bytes", lambda _d: 0)
    assert prepare_dataset(data, 256 * KiB).reused


def test_zero_bytes_needs_no_files(tmp_path: Path) -> None:
    info = prepare_dataset(Data(dir=str(tmp_path / "none")), 0)
    assert info.files == () and not (tmp_path / "none").exists()


@pytest.fixture
def shm_dir() -> Path:
    base = Path("/dev/shm")
    if not base.is_dir() or fs_type(base) not in MEMORY_FS_TYPES:
        pytest.skip("no memory-backed /dev/shm on this machine")
    path = base / f"ddnn-testbed-test-{os.getpid()}"
    yield path
    for p in sorted(path.rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    if path.exists():
        path.rmdir()


def test_tmpfs_is_refused_with_the_fix_in_the_message(shm_dir: Path) -> None:
    with pytest.raises(UserError) as err:
        prepare_dataset(Data(dir=str(shm_dir), file_bytes=64 * KiB), 128 * KiB)
    msg = str(err.value)
    assert "tmpfs" in msg and "memory-backed" in msg and "allow_cached: true" in msg and "data.dir" in msg
    assert not shm_dir.exists()


def test_tmpfs_is_accepted_with_allow_cached_and_marked(shm_dir: Path) -> None:
    info = prepare_dataset(Data(dir=str(shm_dir), file_bytes=64 * KiB, allow_cached=True), 128 * KiB)
    assert info.cache_bypass is False and info.fs_type == "tmpfs"
    assert [os.path.getsize(p) for p, _ in info.files] == [64 * KiB, 64 * KiB]
    assert check_cache_bypass(shm_dir, allow_cached=True) == ("tmpfs", False)
    with DirectReader(64 * KiB, cache_bypass=info.cache_bypass) as reader:
        assert reader.read_plan([(p, 0, n) for p, n in info.files]) == 128 * KiB
        assert reader.mode == "cached"


def test_the_warm_pass_reads_every_file_once_and_says_so(tmp_path: Path) -> None:
    from testbed.data.dataset import warm_dataset
    info = prepare_dataset(Data(dir=str(_disk_tmp(tmp_path)), file_bytes=64 * KiB), 200 * KiB)
    assert info.warmed_bytes == 0
    warm = warm_dataset(info, 64 * KiB)
    assert warm.warmed_bytes == 200 * KiB and warm.warm_s > 0
    assert (warm.files, warm.directory, warm.written_bytes) == (info.files, info.directory, info.written_bytes)


def test_no_warm_pass_where_the_page_cache_holds_the_data_set_anyway(shm_dir: Path) -> None:
    from testbed.data.dataset import warm_dataset
    info = prepare_dataset(Data(dir=str(shm_dir), file_bytes=64 * KiB, allow_cached=True), 128 * KiB)
    assert warm_dataset(info, 64 * KiB) == info
