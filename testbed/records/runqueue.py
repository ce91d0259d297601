"""A thread's wait for a core: Linux's per-thread scheduler statistics.

``/proc/thread-self/schedstat`` holds three figures for the calling thread: the CPU time it
has run, the time it has spent runnable but waiting on a run queue, and how many times it was
put on a core (nanoseconds, counts; since the thread started). The second, read before and
after an interval, says how much of the interval the thread waited for a core once it was
ready to run: what a busy node adds to a blocking read, apart from the device's time and any
wait for a lock (sleeping, not runnable, in neither figure).

Where the kernel does not keep the figures (not Linux, or a kernel without them), ``waited_ns``
returns None and callers record nothing. Reading the file costs about 10 us.
"""

from __future__ import annotations

from typing import Optional

__all__ = ["waited_ns", "SCHEDSTAT"]

SCHEDSTAT = "/proc/thread-self/schedstat"
_missing: set[str] = set()   # files found absent or unreadable, so a machine without one pays one try


def waited_ns(path: str = SCHEDSTAT) -> Optional[int]:
    """The calling thread's time on a run queue so far (ns), or None where it is not known."""
    if path in _missing:
        return None
    try:
        with open(path, "rb") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        _missing.add(path)
        return None
