"""Disk calibration: what the disk under the data directory delivers, as a ``DiskProfile``.

With fio (the reference): sequential reads of ``block_bytes`` by 1, 2, 4 ... ``max_jobs``
concurrent jobs, each on its own region of one file, then random reads at 4 KiB and at the
sample size, and random 4 KiB reads by 2, 4 ... ``max_jobs`` readers at once, all
``direct=1``, in the data set's own directory. Without fio: the same
measurements with the testbed's own ``DirectReader`` (threads; its reads release the GIL),
marked ``source="testbed-reader"``, and a warning saying how to install fio.

The calibration file is written like a data-set file (incompressible, synced, dropped from
the page cache) and removed afterwards, whatever happens.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from testbed.config.errors import UserError
from testbed.data.dataset import check_cache_bypass, write_random_file
from testbed.data.diskio import ALIGN_BYTES, START_BYTES, START_PAUSE_S, START_SAMPLES, DirectReader, first_read_times, read_start_s
from testbed.data.fio import FIO_INSTALL_HINT, FioJob, FioNotFound, find_fio, run_job
from testbed.model.profile import DiskProfile
from testbed.records.atomic import atomic_write_text

__all__ = ["calibrate_disk", "concurrency_levels", "save_disk_profile", "load_disk_profile", "FALLBACK_WARNING"]

log = logging.getLogger(__name__)

FALLBACK_WARNING = (f"fio is not installed, so the disk was measured with the testbed's own reader "
                    f"(source: testbed-reader); for the reference figures {FIO_INSTALL_HINT}")
_SMALL_BLOCK_BYTES = 4096
# Each concurrent random-read level runs this long at most (the figure is a ratio to the
# single reader's, steady within a few percent after 0.5 s; four levels cost 1.5 s).
RAND_CONCURRENT_RUNTIME_S = 0.5


def concurrency_levels(max_jobs: int) -> list[int]:
    """1, 2, 4 ... up to ``max_jobs``, and ``max_jobs`` itself."""
    if max_jobs < 1:
        raise ValueError(f"max_jobs must be >= 1, got {max_jobs}")
    levels, k = [], 1
    while k < max_jobs:
        levels.append(k)
        k *= 2
    return levels + [max_jobs]


def _align_up(n: int) -> int:
    return -(-n // ALIGN_BYTES) * ALIGN_BYTES


def calibrate_disk(directory: str | os.PathLike, out: Optional[str | os.PathLike] = None, *, max_jobs: int = 4,
                   file_bytes: int = 256 * 2**20, block_bytes: int = 2**20, sample_bytes: int = 4096,
                   runtime_s: float = 2.0, allow_cached: bool = False, require_fio: bool = False,
                   method: str = "fio",
                   fio_search_path: Optional[str] = None,
                   progress: Optional[Callable[[str], None]] = None,
                   file_name: Optional[str] = None, keep_file: bool = False,
                   read_start: bool = True) -> DiskProfile:
    """Measure the disk under ``directory``; write the profile to ``out`` if given.

    The reads go to a file of ``file_bytes`` written for them (``file_name`` in ``directory``,
    by default a name of this process's), which is deleted at the end unless ``keep_file``; a
    file of that name and size already there is read as it is (a second measurement of the
    same disk, fio's after the reader's, saves writing 512 MiB again: ~3 s of calibration).

    Random reads at ``sample_bytes`` are measured at its 4 KiB-aligned size (what a direct
    read of one sample costs) and keyed by ``sample_bytes``. ``require_fio`` turns the
    fallback into ``FioNotFound``. ``method="reader"`` measures with the testbed's reader
    even where fio exists: the figures the testbed itself achieves, which can beat fio's
    psync where the buffer's page layout matters (virtio disks; see diskio._direct_buffer).
    ``read_start``: measure the first read after idle too (``measure_read_start``, ~0.7 s;
    always with the testbed's reader, which is what a worker's init read is).
    """
    if method not in ("fio", "reader"):
        raise ValueError(f"method must be 'fio' or 'reader', got {method!r}")
    say = progress or (lambda _msg: None)
    directory = Path(os.path.expanduser(os.fspath(directory)))
    if block_bytes % ALIGN_BYTES or file_bytes < block_bytes * max_jobs:
        raise ValueError(f"need block_bytes a multiple of {ALIGN_BYTES} and file_bytes >= block_bytes * max_jobs, "
                         f"got {block_bytes}, {file_bytes}, {max_jobs}")
    kind, bypass = check_cache_bypass(directory, allow_cached)
    fio = None
    try:
        if method == "fio":
            fio = find_fio(fio_search_path)
    except FioNotFound:
        if require_fio:
            raise
        log.warning(FALLBACK_WARNING)
        say(FALLBACK_WARNING)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot create {directory} for the disk calibration ({err.strerror}); pass a writable --dir") from None
    name = file_name or f".calibrate-{os.getpid()}.bin"
    path = directory / name
    try:
        if not (path.is_file() and path.stat().st_size == file_bytes):
            say(f"writing a {file_bytes // 2**20} MiB calibration file")
            try:
                write_random_file(path, file_bytes, seed=file_bytes)
            except OSError as err:
                raise UserError(f"cannot write the calibration file in {directory} ({err.strerror}); free space "
                                f"or pass another --dir") from None
        rand_sizes = sorted({_SMALL_BLOCK_BYTES, sample_bytes})
        measure = _FioMeasure(fio, directory, name, bypass) if fio else _ReaderMeasure(path, bypass)
        seq = {}
        for k in concurrency_levels(max_jobs):
            say(f"sequential read, {k} concurrent reader(s), {runtime_s:g} s")
            region = file_bytes // k // block_bytes * block_bytes
            seq[k] = measure.seq(k, block_bytes, region, runtime_s)
        iops, latency = {}, {}
        for size in rand_sizes:
            say(f"random read of {size} bytes, {runtime_s:g} s")
            iops[size], pcts = measure.rand(_align_up(size), file_bytes, runtime_s)
            if size == _SMALL_BLOCK_BYTES:
                latency = pcts
        # Random reads of 4 KiB by k readers at once, as k workers read their step input: a
        # virtual disk serves several at once (12.6k IOPS alone, 22.5k by 4, 40k by 16 here).
        by_readers = {1: iops[_SMALL_BLOCK_BYTES]}
        short_s = min(runtime_s, RAND_CONCURRENT_RUNTIME_S)
        for k in concurrency_levels(max_jobs)[1:]:
            say(f"random read of {_SMALL_BLOCK_BYTES} bytes, {k} concurrent reader(s), {short_s:g} s")
            by_readers[k] = measure.rand_concurrent(k, _SMALL_BLOCK_BYTES, file_bytes, short_s)
        start = measure_read_start(path, file_bytes, block_bytes, bypass, seq[1], say) if read_start else 0.0
    finally:
        if not keep_file:
            path.unlink(missing_ok=True)
    profile = DiskProfile(seq_read_bytes_per_s=seq, block_bytes=block_bytes, rand_read_iops=iops,
                          latency_s=latency, directory=str(directory), fs_type=kind,
                          source="fio" if fio else "testbed-reader", rand_read_iops_by_readers=by_readers,
                          read_start_s=start)
    if out is not None:
        save_disk_profile(profile, out)
    return profile


class _FioMeasure:
    def __init__(self, fio: str, directory: Path, filename: str, direct: bool) -> None:
        self.fio, self.directory, self.filename, self.direct = fio, directory, filename, direct

    def seq(self, jobs: int, block_bytes: int, region_bytes: int, runtime_s: float) -> float:
        job = FioJob("seqread", "read", block_bytes, self.filename, region_bytes, jobs,
                     region_bytes if jobs > 1 else 0, runtime_s, direct=self.direct)
        return run_job(job, self.directory, fio=self.fio).read_bytes_per_s

    def rand(self, block_bytes: int, file_bytes: int, runtime_s: float) -> tuple[float, dict[str, float]]:
        job = FioJob("randread", "randread", block_bytes, self.filename, file_bytes, 1, 0, runtime_s,
                     direct=self.direct)
        result = run_job(job, self.directory, fio=self.fio)
        return result.read_iops, result.clat_percentiles_s

    def rand_concurrent(self, readers: int, block_bytes: int, file_bytes: int, runtime_s: float) -> float:
        """The IOPS of ``readers`` jobs reading at random over the whole file at once."""
        job = FioJob("randread", "randread", block_bytes, self.filename, file_bytes, readers, 0, runtime_s,
                     direct=self.direct)
        return run_job(job, self.directory, fio=self.fio).read_iops


class _ReaderMeasure:
    """The fallback: the same shapes of reads through ``DirectReader``."""

    def __init__(self, path: Path, bypass: bool) -> None:
        self.path, self.bypass = str(path), bypass

    def seq(self, jobs: int, block_bytes: int, region_bytes: int, runtime_s: float) -> float:
        """Each of ``jobs`` readers reads its own region once, as a worker reads its data at init.

        One pass, not a timed loop: re-reading a region at once is served faster than a first
        read on some virtual disks (2.97 against 2.4 GiB/s here), which init never sees."""
        done = [0] * jobs

        def reader(k: int) -> None:
            with DirectReader(block_bytes, self.bypass) as r:
                done[k] += r.read_plan([(self.path, k * region_bytes, region_bytes)])

        t0 = time.perf_counter()
        threads = [threading.Thread(target=reader, args=(k,)) for k in range(jobs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sum(done) / (time.perf_counter() - t0)

    def rand(self, block_bytes: int, file_bytes: int, runtime_s: float) -> tuple[float, dict[str, float]]:
        rng = np.random.default_rng(block_bytes)
        slots = file_bytes // block_bytes
        lat_s: list[float] = []
        clock = time.perf_counter
        with DirectReader(block_bytes, self.bypass) as r:
            t_start = clock()
            while clock() - t_start < runtime_s:
                offsets = rng.integers(0, slots, size=256) * block_bytes
                for off in offsets.tolist():
                    t0 = clock()
                    r.read_plan([(self.path, off, block_bytes)])
                    lat_s.append(clock() - t0)
            elapsed = clock() - t_start
        q = np.percentile(lat_s, [50, 90, 99, 99.9])
        return len(lat_s) / elapsed, {name: float(v) for name, v in zip(("p50", "p90", "p99", "p99.9"), q)}

    def rand_concurrent(self, readers: int, block_bytes: int, file_bytes: int, runtime_s: float) -> float:
        """The IOPS of ``readers`` threads reading at random over the whole file at once (a
        direct read releases the GIL while it waits for the disk)."""
        slots = file_bytes // block_bytes
        done = [0] * readers
        clock = time.perf_counter

        def reader(k: int) -> None:
            rng = np.random.default_rng(block_bytes + k)
            with DirectReader(block_bytes, self.bypass) as r:
                while clock() - t_start < runtime_s:
                    for off in (rng.integers(0, slots, size=64) * block_bytes).tolist():
                        r.read_plan([(self.path, off, block_bytes)])
                    done[k] += 64

        threads = [threading.Thread(target=reader, args=(k,)) for k in range(readers)]
        t_start = clock()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sum(done) / (clock() - t_start)


def measure_read_start(path: Path, file_bytes: int, block_bytes: int, cache_bypass: bool, bytes_per_s: float,
                       say: Callable[[str], None] = lambda _msg: None) -> float:
    """``DiskProfile.read_start_s`` on the calibration file: ``START_SAMPLES`` first reads of
    ``START_BYTES`` by new readers after ``START_PAUSE_S`` idle, at offsets spread over the
    file (each a region not read just before), against ``bytes_per_s`` (~0.7 s)."""
    stride = file_bytes // START_SAMPLES // ALIGN_BYTES * ALIGN_BYTES
    nbytes = min(START_BYTES, stride)
    if nbytes <= 0:
        return 0.0
    say(f"first reads after idle ({START_SAMPLES} x {nbytes // 1024} KiB)")
    extents = [(str(path), k * stride, nbytes) for k in range(START_SAMPLES)]
    return read_start_s(first_read_times(extents, block_bytes, cache_bypass, START_PAUSE_S), nbytes, bytes_per_s)


def save_disk_profile(profile: DiskProfile, path: str | os.PathLike) -> Path:
    """Write the profile as JSON (atomically: a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, json.dumps(dataclasses.asdict(profile), indent=2, sort_keys=True) + "\n")


def load_disk_profile(path: str | os.PathLike) -> DiskProfile:
    path = Path(path)
    try:
        return DiskProfile(**json.loads(path.read_text()))
    except FileNotFoundError:
        raise UserError(f"{path}: no such disk profile; make one with `testbed calibrate disk --dir DIR --out {path}`") from None
    except (json.JSONDecodeError, TypeError, ValueError) as err:
        raise UserError(f"{path}: not a usable disk profile ({err}); re-create it with `testbed calibrate disk`") from None
