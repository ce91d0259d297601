"""The scheduler probe: how late a busy-wait ends and how long a woken process waits for a
core, with a given number of CPU-bound processes on this node (``testbed.model.scheduler``).

The load is made of plain interpreter processes that spin forever (``python -S -c``: no
imports, ~10 ms to start), started as the load grows and killed at the end whatever happens.
At each load the probe behaves like a spinning worker: it busy-waits ``spin_s`` with the
emulator's own ``spin`` (the overshoot is how much longer that took), then blocks ``reads``
times for ``block_s`` (a direct read's wait for its device; the excess over ``block_s`` is the
wake). The first wake after the spin is also kept on its own: a process that has just held a
core for its quanta waits its turn behind the spinners, while one that has just slept is woken
ahead of them (at 1-4 spinners a core the first wait was 5-18 times the next ones' here).
All are reported as the excess over the same figure with no load, so what the calibrated read
and call figures already hold at rest is not counted twice.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from typing import Sequence

from testbed.emulation.compute import spin

__all__ = ["SchedulerProbe", "scheduler_samples"]

SPINNER = "while True:\n    pass\n"


def _sample(spin_s: float, reads: int, block_s: float) -> tuple[float, float, float]:
    """(the spin's overshoot, the first wake after it, the mean wake over all ``reads``)."""
    clock = time.perf_counter
    t0 = clock()
    spin(spin_s)
    overshoot = clock() - t0 - spin_s
    waits = []
    for _ in range(max(1, reads)):
        t0 = clock()
        time.sleep(block_s)
        waits.append(clock() - t0 - block_s)
    return max(0.0, overshoot), max(0.0, waits[0]), max(0.0, statistics.fmean(waits))


# A sleep as long as a typical emulated apply's (``apply_seconds / S``), timed at rest.
SLEEP_S = 0.004


def sleep_overshoot_s(samples: int, sleep_s: float = SLEEP_S) -> float:
    """The mean of how much longer ``time.sleep(sleep_s)`` took than asked, on an idle node."""
    clock = time.perf_counter
    late = []
    for _ in range(samples):
        t0 = clock()
        time.sleep(sleep_s)
        late.append(clock() - t0 - sleep_s)
    return max(0.0, statistics.fmean(late)) if late else 0.0


def scheduler_samples(loads: Sequence[float], cores: int, samples: int, spin_s: float = 0.02, reads: int = 8,
                      block_s: float = 2e-4, settle_s: float = 0.1) -> dict:
    """For each load (CPU-bound processes besides this one, per core; ascending), the mean
    overshoot of a ``spin_s`` busy-wait, the mean first wake after it and the mean wake per
    blocking call over the ``reads`` calls, all as the excess over the unloaded figures:
    ``{"spin_overshoot_s": [[load, s], ...], "wake_first_s": ..., "wake_s": ...}``;
    and, before any load, how late a ``SLEEP_S`` sleep ends (``"sleep_overshoot_s"``: seconds)."""
    rest_sleep = sleep_overshoot_s(2 * samples)
    spinners: list[subprocess.Popen] = []
    raw: list[tuple[float, float, float, float]] = []
    try:
        for load in sorted(float(x) for x in loads):
            want = round(load * cores)
            while len(spinners) < want:
                spinners.append(subprocess.Popen([sys.executable, "-S", "-c", SPINNER], stdin=subprocess.DEVNULL,
                                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(settle_s)
            got = [_sample(spin_s, reads, block_s) for _ in range(samples)]
            raw.append((load, *(statistics.fmean(g[i] for g in got) for i in range(3))))
    finally:
        for p in spinners:
            p.kill()
        for p in spinners:
            p.wait()
    if not raw:
        return {"spin_overshoot_s": [], "wake_first_s": [], "wake_s": [], "sleep_overshoot_s": rest_sleep}
    # The excess over no load: measured at load 0 when it is in ``loads``, else none is taken off.
    rest = raw[0][1:] if raw[0][0] == 0 else (0.0, 0.0, 0.0)
    curves = {name: [[row[0], max(0.0, row[i + 1] - rest[i])] for row in raw]
              for i, name in enumerate(("spin_overshoot_s", "wake_first_s", "wake_s"))}
    return {**curves, "sleep_overshoot_s": rest_sleep}


class SchedulerProbe:
    """An actor that runs ``scheduler_samples`` on its node."""

    def samples(self, loads: Sequence[float], cores: int, samples: int, spin_s: float = 0.02) -> dict:
        return scheduler_samples(loads, cores, samples, spin_s)
