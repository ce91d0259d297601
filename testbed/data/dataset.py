"""The synthetic data set: generated once per node, before the timed part, untimed.

``prepare_dataset`` writes D bytes of incompressible data as ``part-00000.bin`` ...
(each ``data.file_bytes`` long, the last one shorter) under
``<data.dir>/ds-<D>-<file_bytes>/``. It is idempotent: a file with the right name
and size is complete, because each file is written to a temporary name, fsync'd
and renamed. Workers on one node may call it concurrently; a lock file makes
the second caller wait and then reuse what the first one wrote.

Before writing it checks the file system: on a memory-backed one (tmpfs, ramfs)
no read can bypass the page cache, so it refuses unless ``data.allow_cached``, and
it checks free space and refuses with the numbers.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import shutil
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from testbed.config.errors import UserError
from testbed.config.spec import Data
from testbed.config.units import format_bytes
from testbed.records.atomic import fsync_dir

__all__ = [
    "DatasetInfo", "MEMORY_FS_TYPES", "prepare_dataset", "dataset_dir", "file_sizes", "fs_type",
    "mount_fs_type", "check_cache_bypass", "write_random_file", "dataset_present_bytes", "check_data_dir",
    "warm_dataset",
]

# File systems that keep file data in RAM: reads from them never reach a disk.
MEMORY_FS_TYPES = frozenset({"tmpfs", "ramfs", "devtmpfs", "hugetlbfs", "rootfs"})
_WRITE_CHUNK_BYTES = 8 * 2**20  # bounded memory while writing, large enough to stream
_SEED_BASE = 0x5EED_DA7A        # fixed, so every node writes the same bytes


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """What ``prepare_dataset`` left on this node (plain data; ships through Ray as is)."""
    directory: str
    files: tuple[tuple[str, int], ...]  # (path, bytes) in data-set order
    fs_type: str
    cache_bypass: bool                  # False only on a memory-backed fs with allow_cached
    written_bytes: int = 0              # 0 when every file was reused
    node_tag: str = ""
    warmed_bytes: int = 0               # read by the untimed warm pass (``warm_dataset``)
    warm_s: float = 0.0                 # how long that pass took

    @property
    def total_bytes(self) -> int:
        return sum(n for _, n in self.files)

    @property
    def reused(self) -> bool:
        return self.written_bytes == 0


def dataset_dir(data: Data, dataset_bytes: int) -> Path:
    """The folder of one data-set shape; different sizes never share files."""
    return Path(os.path.expanduser(data.dir)) / f"ds-{dataset_bytes}-{data.file_bytes}"


def file_sizes(dataset_bytes: int, file_bytes: int) -> list[int]:
    """Sizes of the files holding ``dataset_bytes`` in ``file_bytes`` pieces (last one shorter)."""
    if dataset_bytes < 0 or file_bytes <= 0:
        raise ValueError(f"need dataset_bytes >= 0 and file_bytes > 0, got {dataset_bytes}, {file_bytes}")
    full, tail = divmod(dataset_bytes, file_bytes)
    return [file_bytes] * full + ([tail] if tail else [])


def _unescape_mount(field: str) -> str:
    # /proc/mounts writes space, tab, newline and backslash as octal escapes.
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def mount_fs_type(path: str, mounts_text: str) -> str:
    """The fs type of the mount with the longest mount point containing ``path`` (pure)."""
    best_point, best_type = "", "unknown"
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        point, kind = _unescape_mount(parts[1]), parts[2]
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        # ">=": a later mount on the same point hides the earlier one.
        if inside and len(point) >= len(best_point):
            best_point, best_type = point, kind
    return best_type


def fs_type(path: str | os.PathLike) -> str:
    """File system type under ``path`` (which need not exist yet); "unknown" off Linux."""
    real = os.path.realpath(os.path.expanduser(os.fspath(path)))
    try:
        with open("/proc/mounts") as f:
            return mount_fs_type(real, f.read())
    except OSError:
        return "unknown"


def check_cache_bypass(path: str | os.PathLike, allow_cached: bool) -> tuple[str, bool]:
    """(fs type, whether reads can bypass the page cache); refuses a memory-backed fs
    unless ``allow_cached``."""
    kind = fs_type(path)
    if kind not in MEMORY_FS_TYPES:
        return kind, True
    if not allow_cached:
        raise UserError(
            f"data directory {path} is on {kind}, a memory-backed file system: reads cannot bypass the "
            f"page cache there, so the init and read phases would measure RAM, not a disk; set data.dir "
            f"to a directory on a disk, or set data.allow_cached: true to run anyway (recorded as "
            f"cache_bypass: false)")
    return kind, False


def write_random_file(path: Path, nbytes: int, seed: int) -> None:
    """Write ``nbytes`` of seeded random bytes (incompressible, so compressing or deduplicating
    storage can't shortcut the reads) atomically, synced to disk and dropped from the page cache
    so that later reads find nothing cached."""
    tmp = path.with_name(path.name + ".tmp")
    rng = np.random.Generator(np.random.PCG64(seed))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = nbytes
        while left:
            chunk = rng.bytes(min(left, _WRITE_CHUNK_BYTES))
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view):]
            left -= len(chunk)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)  # the rename too survives a crash (the bytes are streamed, not atomic_write_bytes)


def _disk_free_bytes(directory: Path) -> int:
    return shutil.disk_usage(directory).free


def prepare_dataset(data: Data, dataset_bytes: int, node_tag: str = "", *,
                    progress: Optional[Callable[[str], None]] = None) -> DatasetInfo:
    """Make sure this node holds the data set; write what is missing (see the module doc).

    Raises ``UserError`` for a memory-backed fs without ``allow_cached``, for too little free
    space (with the numbers) and for a directory that can't be created or written.
    """
    where = f" on node {node_tag}" if node_tag else ""
    directory = dataset_dir(data, dataset_bytes)
    if dataset_bytes <= 0:
        return DatasetInfo(str(directory), (), "", True, 0, node_tag)
    kind, bypass = check_cache_bypass(directory, data.allow_cached)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(directory / ".lock", os.O_WRONLY | os.O_CREAT, 0o644)
    except OSError as err:
        raise UserError(f"cannot create the data directory {directory}{where} ({err.strerror}); "
                        f"set data.dir to a writable directory") from None
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)  # concurrent workers of one node: one writes, the rest reuse
        sizes = file_sizes(dataset_bytes, data.file_bytes)
        paths = [directory / f"part-{i:05d}.bin" for i in range(len(sizes))]
        missing = [i for i, (p, n) in enumerate(zip(paths, sizes)) if not _has_size(p, n)]
        need = sum(sizes[i] for i in missing) - sum(_size_or_zero(paths[i]) for i in missing)
        free = _disk_free_bytes(directory)
        if need > free:
            raise UserError(
                f"not enough free space for the data set in {directory}{where}: need {need} bytes "
                f"({format_bytes(need)}) more, {free} bytes ({format_bytes(free)}) free; free some space, "
                f"set data.dir to a larger disk, or lower workload.dataset_bytes")
        written = 0
        for i in missing:
            if progress:
                progress(f"writing {paths[i].name} ({format_bytes(sizes[i])}){where}")
            try:
                write_random_file(paths[i], sizes[i], _SEED_BASE + i)
            except OSError as err:
                raise UserError(f"cannot write {paths[i]}{where} ({err.strerror}); check the disk and "
                                f"data.dir") from None
            written += sizes[i]
    finally:
        os.close(lock_fd)  # closing releases the flock
    files = tuple((str(p), n) for p, n in zip(paths, sizes))
    return DatasetInfo(str(directory), files, kind, bypass, written, node_tag)


def warm_dataset(info: DatasetInfo, block_bytes: int) -> DatasetInfo:
    """One untimed pass over every file of ``info`` with the workers' direct reader; ``info``
    with the bytes read and the time it took (``data.warm_pass``).

    Why: a direct read bypasses this machine's page cache but not a cache under it. On the
    2-core VM of 2026-12-02 the virtual disk read files not read for hours at 1.3-1.4 GB/s
    and the same files read again at once at 2.3-3.0 GB/s (1.8-2.1 a minute or so later);
    random 32 KiB reads 560 us cold, 250 us after a pass. Calibration measures warm files
    (fio's just written, the data set after a pass in ``testbed validate``), and in a sweep
    over one data set every config after the first finds it warm, while a config with a data
    set of its own read it cold. With the pass every run reads in the calibrated state
    (docs/model.md, "The disk in the state calibration measured"). Nothing is read where the
    page cache is not bypassed (it holds the data set anyway)."""
    if not info.cache_bypass or not info.files:
        return info
    import time

    from testbed.data.diskio import DirectReader
    start = time.perf_counter()
    with DirectReader(block_bytes, info.cache_bypass) as reader:
        got = reader.read_plan([(path, 0, nbytes) for path, nbytes in info.files])
    return dataclasses.replace(info, warmed_bytes=got, warm_s=time.perf_counter() - start)


def check_data_dir(data: Data) -> None:
    """Refuse a data directory that can't hold a data set, before anything is written: on a
    memory-backed fs (unless allowed), a path through a file, or one that can't be written
    (read-only, no permission). Creates the directory, as writing the data set would."""
    check_cache_bypass(data.dir, data.allow_cached)
    directory = Path(os.path.expanduser(data.dir))
    probe = directory / f".write-test-{os.getpid()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise UserError(f"data directory {directory} cannot be written ({err.strerror or err}); set data.dir to "
                        f"a writable directory on a disk with room for the data set") from None


def dataset_present_bytes(cfg) -> int:
    """Bytes of a config's data set already complete on this node (files of the right size)."""
    directory = dataset_dir(cfg.data, cfg.workload.dataset_bytes)
    total, each = cfg.workload.dataset_bytes, cfg.data.file_bytes
    count = -(-total // each)
    present = 0
    try:
        names = os.listdir(directory)  # only what is there: a huge data set has millions of names
    except OSError:
        return 0
    for name in names:
        if not (name.startswith("part-") and name.endswith(".bin") and name[5:-4].isdigit()):
            continue
        i = int(name[5:-4])
        if i < count and _has_size(directory / name, min(each, total - i * each)):
            present += min(each, total - i * each)
    return present


def _size_or_zero(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _has_size(path: Path, nbytes: int) -> bool:
    return path.is_file() and path.stat().st_size == nbytes
