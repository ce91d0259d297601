"""Step reads as calibrated: the mean time of one direct read after a pause, over its size.

A worker reads its step input after the rest of the previous step (compute, then the push
and the pull), not right after another read. On a virtual disk a direct read after an idle
pause costs several times one in a tight loop (the device and the CPU doze off and must be
woken), and the cost grows with the pause: on the 2-core virtio machine of docs/model.md a
random 4 KiB read took 56 us back to back, 89 us after 5 ms, 115 us after 20 ms and 266 us
after 100 ms of sleep, where the disk's back-to-back figures (``DiskProfile``) predicted 58 us
for it, and 1 us for a sequential one. So calibration measures the read itself, in an actor, after pauses
(``actors.readprobe``), and this record holds what it measured:

- one ``SizeCurve`` per (order, pause): the mean seconds of one contiguous read of that
  many bytes, the first after a pause of ``pause_s`` (0: back to back);
- ``step_read_s`` turns them into a step's read: ``sequential`` reads the minibatch as one
  contiguous range, so one read of minibatch x sample bytes after the pause; ``random``
  reads minibatch separate samples, the first after the pause and the rest back to back,
  each of those less the reader's own work once per step (``step_overhead_s``: a curve's
  read is a step read of one sample, and the later samples of a minibatch don't pay it again).

Between the measured pauses the time is linear in the pause; beyond the longest it stays
at the longest's (the device is as asleep as it gets), and within a curve it is linear in
bytes like every size curve (``SizeCurve.at``).

Pure: the standard library.
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import Any, Optional, Sequence

from testbed.model.curves import SizeCurve

__all__ = ["PausedReadCurve", "StepReadCosts", "READ_ORDERS", "coerce_step_reads", "paused_curves"]

READ_ORDERS = ("sequential", "random")


@dataclasses.dataclass(frozen=True)
class PausedReadCurve:
    """Mean seconds of one direct read of ``bytes`` in ``order``, right after ``pause_s`` idle."""
    order: str
    pause_s: float
    read_s: SizeCurve

    def __post_init__(self) -> None:
        if self.order not in READ_ORDERS:
            raise ValueError(f"paused read curve: order must be one of {READ_ORDERS}, got {self.order!r}")
        if not (float(self.pause_s) >= 0 and float(self.pause_s) < float("inf")):
            raise ValueError(f"paused read curve: pause_s must be finite and >= 0, got {self.pause_s}")
        object.__setattr__(self, "pause_s", float(self.pause_s))
        object.__setattr__(self, "read_s", SizeCurve.coerce(self.read_s))


@dataclasses.dataclass(frozen=True)
class StepReadCosts:
    """The paused-read curves of one disk, and where they were measured."""
    curves: tuple[PausedReadCurve, ...]
    block_bytes: int = 2**20           # the reader's block: a contiguous read is cut into blocks
    pause_kind: str = "sleep"          # what the probe did in the pause (sleep: the CPU idles)
    directory: str = ""
    source: str = "testbed-reader in an actor"
    # The reader's own work once per step read (drawing the positions, building the plan):
    # every back-to-back mean holds it once, and a random minibatch's later samples don't pay
    # it again (0: not measured, calibrations before version 28).
    step_overhead_s: float = 0.0

    def __post_init__(self) -> None:
        curves = tuple(c if isinstance(c, PausedReadCurve) else PausedReadCurve(**c) for c in self.curves)
        if not curves:
            raise ValueError("step read costs need at least one paused read curve")
        keys = [(c.order, c.pause_s) for c in curves]
        if len(set(keys)) != len(keys):
            raise ValueError(f"step read costs: an (order, pause) twice: {keys}")
        object.__setattr__(self, "curves", tuple(sorted(curves, key=lambda c: (c.order, c.pause_s))))
        overhead = float(self.step_overhead_s)
        if not (overhead >= 0 and overhead < float("inf")):
            raise ValueError(f"step read costs: step_overhead_s must be finite and >= 0, got {self.step_overhead_s}")
        object.__setattr__(self, "step_overhead_s", overhead)

    def orders(self) -> tuple[str, ...]:
        return tuple(sorted({c.order for c in self.curves}))

    def _for(self, order: str) -> list[PausedReadCurve]:
        # An order never measured reads the other's curves: both are direct reads of the same disk.
        present = self.orders()
        order = order if order in present else present[0]
        return [c for c in self.curves if c.order == order]

    def read_s(self, order: str, nbytes: float, pause_s: float) -> float:
        """One contiguous read of ``nbytes`` after ``pause_s``: each pause's curve read at the
        size, then linear in the pause between the two measured pauses around it (flat outside)."""
        curves = self._for(order)
        pauses = [c.pause_s for c in curves]
        if pause_s <= pauses[0] or len(curves) == 1:
            return curves[0].read_s.at(nbytes)
        if pause_s >= pauses[-1]:
            return curves[-1].read_s.at(nbytes)
        i = bisect.bisect_left(pauses, pause_s)
        lo, hi = curves[i - 1], curves[i]
        w = (pause_s - lo.pause_s) / (hi.pause_s - lo.pause_s)
        return (1 - w) * lo.read_s.at(nbytes) + w * hi.read_s.at(nbytes)

    def step_read_s(self, order: str, sample_bytes: int, minibatch: int, pause_s: float) -> float:
        """A step's read of ``minibatch`` samples (see the module doc for the two orders)."""
        if order == "sequential":
            return self.read_s(order, minibatch * sample_bytes, pause_s)
        first = self.read_s(order, sample_bytes, pause_s)
        later = max(0.0, self.read_s(order, sample_bytes, 0.0) - self.step_overhead_s)
        return first + (minibatch - 1) * later

    def step_read_wake_s(self, order: str, sample_bytes: int, minibatch: int, pause_s: float) -> float:
        """What the pause adds to a step's read: ``step_read_s`` after ``pause_s`` less the same
        read back to back. The device (and the CPU) waking from the pause: a wait every reader
        pays for itself, side by side with the others, not work the disk does for it; the rest
        (the back-to-back read) is what readers share the disk's rate for (simfamily)."""
        return max(0.0, self.step_read_s(order, sample_bytes, minibatch, pause_s)
                   - self.step_read_s(order, sample_bytes, minibatch, 0.0))


    def at_level(self, hot_shift_s: dict[str, float], wake_ratio: dict[str, float]) -> "StepReadCosts":
        """These curves at another moment's level (``testbed.calibration.readlevel``): per order,
        every back-to-back read moved by ``hot_shift_s[order]`` seconds (the device's latency,
        the same at every size; never below 0) and every pause's wake-up (its read less the
        back-to-back read of the same size) times ``wake_ratio[order]``; an order in neither
        stays as it is. The shape over sizes and pauses stays the calibration's."""
        curves = []
        for c in self.curves:
            shift, ratio = float(hot_shift_s.get(c.order, 0.0)), float(wake_ratio.get(c.order, 1.0))
            points = []
            for nbytes, t in c.read_s.points:
                hot = self.read_s(c.order, nbytes, 0.0) if c.pause_s > 0 else t
                points.append((nbytes, max(0.0, hot + shift) + ratio * max(0.0, t - hot)))
            curves.append(PausedReadCurve(c.order, c.pause_s, SizeCurve(tuple(points))))
        return dataclasses.replace(self, curves=tuple(curves))


def coerce_step_reads(value: Optional[Any]) -> Optional[StepReadCosts]:
    """A ``StepReadCosts`` from itself, a saved dict, or None."""
    if value is None or isinstance(value, StepReadCosts):
        return value
    if isinstance(value, dict):
        return StepReadCosts(**value)
    raise TypeError(f"step_reads: expected a mapping, got {type(value).__name__}")


def paused_curves(rows: Sequence[tuple[str, float, int, float]]) -> tuple[PausedReadCurve, ...]:
    """Curves from measured ``(order, pause_s, bytes, mean_s)`` rows (calibration's output)."""
    by: dict[tuple[str, float], list[tuple[float, float]]] = {}
    for order, pause_s, nbytes, mean_s in rows:
        by.setdefault((order, float(pause_s)), []).append((float(nbytes), float(mean_s)))
    return tuple(PausedReadCurve(order, pause, SizeCurve(tuple(points))) for (order, pause), points in sorted(by.items()))

