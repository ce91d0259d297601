"""Mapping Ray's object store into this process up front.

Every object Ray hands an actor lives in the object store's shared memory (one big
``/dev/shm/plasma*`` mapping in every worker process). Ray's store fills all of its memory
before it reuses any (freed objects are only evicted when space is needed), so for the
first pass through the store every pushed gradient lands in pages this process has never
touched: reading a 16 MiB gradient then costs ~260 page faults (~1 ms, a third of the
apply), and writing a reply into fresh pages costs a fault per page. ``premap_object_store``
maps the whole store into this process's page tables once, at start-up
(``madvise(MADV_POPULATE_WRITE)``, Linux >= 5.14), so an apply costs what the memory
allows from the first push on. Stores larger than ``max_bytes`` (a cluster node's default
store is 30% of its memory) are left alone: populating them would commit that memory.
"""

from __future__ import annotations

import ctypes
import time

__all__ = ["premap_object_store", "object_store_mappings"]

_MADV_POPULATE_WRITE = 23
DEFAULT_MAX_BYTES = 2 * 2**30


def object_store_mappings(maps_text: str) -> list[tuple[int, int]]:
    """(start, end) of the shared ``plasma`` mappings in a ``/proc/<pid>/maps`` text (pure)."""
    out = []
    for line in maps_text.splitlines():
        fields = line.split()
        if len(fields) >= 6 and "/plasma" in fields[5] and fields[1].endswith("s"):
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            out.append((lo, hi))
    return out


def premap_object_store(max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, float]:
    """Populate this process's page tables for the object store; returns what it did
    (bytes mapped, seconds taken, and an errno when the kernel refused: nothing breaks)."""
    try:
        with open("/proc/self/maps") as f:
            regions = object_store_mappings(f.read())
    except OSError:
        return {"bytes": 0, "seconds": 0.0, "errno": -1}
    libc = ctypes.CDLL(None, use_errno=True)
    done, errno, t0 = 0, 0, time.perf_counter()
    for lo, hi in regions:
        if done + (hi - lo) > max_bytes:
            continue
        if libc.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), _MADV_POPULATE_WRITE) != 0:
            errno = ctypes.get_errno()
            continue
        done += hi - lo
    return {"bytes": done, "seconds": time.perf_counter() - t0, "errno": errno}
