"""Reads that reach the disk, not the page cache: init read plans, a direct reader, step reads.

Terms: an *extent* is ``(path, offset, nbytes)``, a byte range of one file; a *plan* is
a list of extents read in order. The data set is the concatenation of its files, so a
worker's shard is a contiguous range of that concatenation, cut into extents.

``DirectReader`` reads with O_DIRECT into one page-aligned buffer (an anonymous mmap
is page-aligned), which keeps the page cache out entirely. The buffer is private memory
advised to use transparent huge pages (see ``_direct_buffer``). O_DIRECT needs aligned
offsets and lengths, so an extent is read as its aligned superset and only its own
bytes are counted. Where the file system rejects O_DIRECT (EINVAL) it falls back to
plain reads with readahead off, the block's pages dropped just before it is read
(``posix_fadvise(DONTNEED)`` after ``fdatasync``, since dirty pages can't be dropped)
and the extent dropped again afterwards so the next reader finds nothing cached.
"""

from __future__ import annotations

import bisect
import ctypes
import errno
import mmap
import os
import statistics
from typing import Callable, Optional, Sequence, Union

import numpy as np

from testbed.config.spec import Partition, StepReads

__all__ = ["ALIGN_BYTES", "Extent", "init_read_plan", "DirectReader", "StepReader", "plan_bytes",
           "first_read_times", "read_start_s", "START_SAMPLES", "START_PAUSE_S", "START_BYTES"]

# Logical block sizes are 512 or 4096 bytes; aligning to 4096 satisfies both.
ALIGN_BYTES = 4096

_HUGE_PAGE_BYTES = 2 * 2**20
_HUGE_BUFFER_MIN_BYTES = 64 * 1024  # below this one request has few segments anyway

Extent = tuple[str, int, int]
FileOrExtent = Union[tuple[str, int], tuple[str, int, int]]


def _extents(files: Sequence[FileOrExtent]) -> list[Extent]:
    """(path, bytes) whole files or (path, offset, bytes) extents, as extents."""
    out = []
    for item in files:
        path, offset, nbytes = (item[0], 0, item[1]) if len(item) == 2 else item
        if offset < 0 or nbytes < 0:
            raise ValueError(f"negative offset or size in {item!r}")
        if nbytes:
            out.append((str(path), int(offset), int(nbytes)))
    return out


class _Concat:
    """Byte ranges of the concatenation of extents, mapped back to extents."""

    def __init__(self, extents: list[Extent]) -> None:
        self.extents = extents
        self.starts = [0]
        for _, _, n in extents:
            self.starts.append(self.starts[-1] + n)
        self.total_bytes = self.starts[-1]

    def pieces(self, lo: int, nbytes: int, wrap: bool = False) -> list[Extent]:
        out: list[Extent] = []
        while nbytes > 0 and self.total_bytes:
            if lo >= self.total_bytes:
                if not wrap:
                    raise ValueError(f"byte {lo} is past the end ({self.total_bytes} bytes)")
                lo %= self.total_bytes
            i = bisect.bisect_right(self.starts, lo) - 1
            path, offset, size = self.extents[i]
            within = lo - self.starts[i]
            n = min(nbytes, size - within)
            if out and out[-1][0] == path and out[-1][1] + out[-1][2] == offset + within:
                out[-1] = (path, out[-1][1], out[-1][2] + n)  # contiguous: one extent
            else:
                out.append((path, offset + within, n))
            lo += n
            nbytes -= n
        return out


def _direct_buffer(nbytes: int) -> tuple[mmap.mmap, memoryview]:
    """A page-aligned buffer for direct reads: (the mapping, a view of ``nbytes`` of it).

    Private, not ``mmap(-1, n)``'s default MAP_SHARED (that is shmem, which gets no huge
    pages), and for large blocks 2 MiB-aligned and advised MADV_HUGEPAGE. A huge page is
    physically contiguous, so a 1 MiB direct read is one segment instead of up to 256; on
    virtio disks the per-segment cost halved the throughput of 4 KiB-page buffers (see
    benchmarks/disk_init_vs_fio.py). Where the kernel has no huge page to give, this is
    an ordinary page-aligned buffer.
    """
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if nbytes < _HUGE_BUFFER_MIN_BYTES or advice is None:
        buf = mmap.mmap(-1, nbytes, flags=flags)
        return buf, memoryview(buf)
    span = -(-nbytes // _HUGE_PAGE_BYTES) * _HUGE_PAGE_BYTES
    buf = mmap.mmap(-1, span + _HUGE_PAGE_BYTES, flags=flags)
    probe = ctypes.c_char.from_buffer(buf)
    start = -ctypes.addressof(probe) % _HUGE_PAGE_BYTES
    del probe  # an exported pointer would keep the mapping from closing
    try:
        buf.madvise(advice, start, span)
    except OSError:
        pass  # THP disabled: plain pages still work
    return buf, memoryview(buf)[start:start + nbytes]


def plan_bytes(plan: Sequence[Extent]) -> int:
    return sum(n for _, _, n in plan)


def init_read_plan(files: Sequence[FileOrExtent], dataset_bytes: int, worker_index: int, workers: int,
                   partition: Partition | str) -> list[Extent]:
    """What worker ``worker_index`` of ``workers`` reads at init (pure).

    ``shard``: a contiguous 1/N of the first ``dataset_bytes`` bytes, with inner edges
    aligned down to ``ALIGN_BYTES`` so direct reads don't straddle shards; ``full``: all of them.
    """
    if not 0 <= worker_index < workers:
        raise ValueError(f"worker_index {worker_index} is not in [0, {workers})")
    concat = _Concat(_extents(files))
    if not 0 <= dataset_bytes <= concat.total_bytes:
        raise ValueError(f"dataset_bytes {dataset_bytes} is not in [0, {concat.total_bytes}] (the files' total)")
    if Partition(partition) is Partition.FULL:
        return concat.pieces(0, dataset_bytes)

    def edge(k: int) -> int:
        return dataset_bytes if k == workers else (dataset_bytes * k // workers) // ALIGN_BYTES * ALIGN_BYTES
    lo, hi = edge(worker_index), edge(worker_index + 1)
    return concat.pieces(lo, hi - lo)


class DirectReader:
    """Reads plans through one reused page-aligned buffer of ``block_bytes``.

    ``mode`` says how the last file was read: ``o_direct``, ``fadvise`` (the fallback) or
    ``cached`` (``cache_bypass=False``: a memory-backed fs run with ``allow_cached``).
    """

    def __init__(self, block_bytes: int, cache_bypass: bool = True) -> None:
        if block_bytes <= 0 or block_bytes % ALIGN_BYTES:
            raise ValueError(f"block_bytes must be a positive multiple of {ALIGN_BYTES}, got {block_bytes}")
        self.block_bytes = block_bytes
        self.cache_bypass = cache_bypass
        self.mode = "o_direct" if cache_bypass else "cached"
        self._buf, self._view = _direct_buffer(block_bytes)
        # Touch the buffer now, so its pages (a huge page where the kernel has one) are found
        # here, at construction, not inside the first timed read. Where free memory is
        # fragmented that first touch compacts memory for the huge page: on the 2-core VM, with
        # 21 workers' 11 MiB gradients in memory, a worker's first read of 3.4 MiB took 9 ms
        # with an untouched buffer and 1.5-1.9 ms with a touched one (the data set warm both times).
        self._view[:] = bytes(block_bytes)
        self._fds: dict[str, tuple[int, str]] = {}  # kept open: step reads revisit the same files

    def _open(self, path: str) -> tuple[int, str]:
        entry = self._fds.get(path)
        if entry is None:
            entry = self._fds[path] = self._open_new(path, direct=self.cache_bypass)
        self.mode = entry[1]
        return entry

    def _open_new(self, path: str, direct: bool) -> tuple[int, str]:
        if direct:
            try:
                return os.open(path, os.O_RDONLY | os.O_DIRECT), "o_direct"
            except OSError as err:
                if err.errno != errno.EINVAL:
                    raise
        fd = os.open(path, os.O_RDONLY)
        if not self.cache_bypass:
            return fd, "cached"
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no readahead: read exactly what we drop
        return fd, "fadvise"

    def read_plan(self, plan: Sequence[Extent], sink: Optional[Callable[[memoryview], None]] = None) -> int:
        """Read every extent of ``plan`` in order; returns the bytes read (an extent past the end
        of its file counts only what exists). ``sink``, if given, sees each piece of data."""
        total = 0
        for path, offset, nbytes in plan:
            try:
                total += self._read_extent(path, offset, nbytes, sink)
            except OSError as err:
                if err.errno != errno.EINVAL or self._fds[path][1] != "o_direct":
                    raise
                # Some file systems accept O_DIRECT at open and reject it at read.
                os.close(self._fds.pop(path)[0])
                self._fds[path] = self._open_new(path, direct=False)
                total += self._read_extent(path, offset, nbytes, sink)
        return total

    def _read_extent(self, path: str, offset: int, nbytes: int, sink: Optional[Callable[[memoryview], None]]) -> int:
        fd, mode = self._open(path)
        end = offset + nbytes
        pos = offset - offset % ALIGN_BYTES
        if mode == "fadvise":
            os.fdatasync(fd)
        view, block, preadv = self._view, self.block_bytes, os.preadv
        got_total = 0
        while pos < end:
            want = min(block, -(-(end - pos) // ALIGN_BYTES) * ALIGN_BYTES)
            if mode == "fadvise":
                os.posix_fadvise(fd, pos, want, os.POSIX_FADV_DONTNEED)
            got = preadv(fd, [view[:want]], pos)
            lo, hi = max(pos, offset), min(pos + got, end)
            if hi > lo:
                got_total += hi - lo
                if sink is not None:
                    sink(view[lo - pos:hi - pos])
            if got < want:  # end of file
                break
            pos += got
        if mode == "fadvise":
            os.posix_fadvise(fd, offset, nbytes, os.POSIX_FADV_DONTNEED)
        return got_total

    def close(self) -> None:
        for fd, _ in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self._view.release()
        self._buf.close()

    def __enter__(self) -> "DirectReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# The first read after idle (``first_read_times``): how many, after what pause, of how much.
START_SAMPLES = 7
START_PAUSE_S = 0.1
START_BYTES = 2 * 2**20


def first_read_times(extents: Sequence[Extent], block_bytes: int, cache_bypass: bool = True,
                     pause_s: float = START_PAUSE_S, sleep: Optional[Callable[[float], None]] = None,
                     clock: Optional[Callable[[], float]] = None) -> list[float]:
    """Seconds each extent took as the first read of a new reader made after ``pause_s`` idle,
    one extent after the other: what a worker's init read is (its process idle since setup, its
    reader new).

    Why: a worker's init read of a few MiB measured 0.3-1.5 ms beyond its bytes at the data
    set's rate (the sequential inits of the held-out draws of 2026-12-05, one reader at a time),
    while one reader reading the first 1-16 MiB of every file back to back read at the full rate
    with no start cost at all (0.06 ms fitted, 2026-12-05 03:55). A new reader after a pause read
    2 MiB in 1.03-1.13 ms where back to back it took 0.70 (0.64 at the rate), and a fresh
    process's first read 1.01 ms; so the cost is the first read after idle, not a file's."""
    import time
    sleep = sleep or time.sleep
    clock = clock or time.perf_counter
    out = []
    for extent in extents:
        sleep(pause_s)
        with DirectReader(block_bytes, cache_bypass) as reader:
            t0 = clock()
            reader.read_plan([extent])
            out.append(clock() - t0)
    return out


def read_start_s(times: Sequence[float], nbytes: int, bytes_per_s: float) -> float:
    """What a first read after idle costs beyond its bytes at ``bytes_per_s`` (the single
    reader's rate the model reads with): the median of ``times`` less ``nbytes / bytes_per_s``,
    never below 0; 0 without times (pure)."""
    if not times or bytes_per_s <= 0:
        return 0.0
    return max(0.0, statistics.median(times) - nbytes / bytes_per_s)


class StepReader:
    """Each step's input: ``minibatch`` samples of ``sample_bytes`` from the worker's files.

    ``files`` are whole files ``(path, bytes)`` or extents (e.g. the worker's init plan).
    ``sequential`` walks the concatenation and wraps around; ``random`` reads samples at
    ``sample_bytes``-aligned positions drawn from ``rng``. ``reader`` has ``read_plan``.
    """

    def __init__(self, files: Sequence[FileOrExtent], sample_bytes: int, minibatch: int,
                 order: StepReads | str, rng: np.random.Generator, reader: DirectReader) -> None:
        self.order = StepReads(order)
        if self.order is StepReads.NONE:
            raise ValueError("StepReader needs order 'sequential' or 'random', not 'none'")
        if sample_bytes <= 0 or minibatch <= 0:
            raise ValueError(f"sample_bytes and minibatch must be > 0, got {sample_bytes}, {minibatch}")
        self._concat = _Concat(_extents(files))
        if not self._concat.total_bytes:
            raise ValueError("StepReader needs at least one non-empty file")
        self.sample_bytes = sample_bytes
        self.minibatch = minibatch
        self.step_bytes = sample_bytes * minibatch
        self._samples = max(1, self._concat.total_bytes // sample_bytes)
        self._rng = rng
        self._reader = reader
        self._cursor = 0

    def next_plan(self) -> list[Extent]:
        """The extents of the next step (advances the position); ``read_step`` reads them."""
        if self.order is StepReads.SEQUENTIAL:
            plan = self._concat.pieces(self._cursor, self.step_bytes, wrap=True)
            self._cursor = (self._cursor + self.step_bytes) % self._concat.total_bytes
            return plan
        plan = []
        for k in self._rng.integers(0, self._samples, size=self.minibatch):
            plan.extend(self._concat.pieces(int(k) * self.sample_bytes, self.sample_bytes, wrap=True))
        return plan

    def read_step(self) -> int:
        """Read one step's samples; returns the bytes read."""
        return self._reader.read_plan(self.next_plan())

    def close(self) -> None:
        """Close the reader this step reader was given (it owns it from then on)."""
        self._reader.close()
