"""The node's scheduler when more processes want a core than there are cores.

Processor sharing (``simkit.SharedRate``) is the limit of round-robin with vanishing quanta:
a burst of CPU work is stretched smoothly by the number of processes sharing the cores. The
kernel's quanta are not vanishing (a few ms), and two things follow that processor sharing
cannot show, both measured on the 2-core machine of docs/model.md with k processes spinning:

- a busy-wait until a wall-clock deadline (the emulator's ``spin`` compute) ends late: when
  the deadline passes while the process waits for its next turn, it notices only at that
  turn. 20 ms of spin ended 0 ms late alone, ~3 ms late with 4-8 spinners, 8-9 ms with 12,
  12-25 ms with 16-32;
- a process that blocks on I/O and is woken waits for a core each time: 8 reads of 4 KiB
  waited ~0.1 ms each alone and with 2-4 spinners, ~1.5 ms with 8, 2.5-3.8 ms with 12-32
  (a random step read is minibatch such reads, so 20-30 ms where the disk alone says 1 ms).
  The first read after the process held a core waits longest: it has used its share and
  queues behind the spinners, while the next ones, after a sleep, are woken ahead of them
  (with 2-8 spinners: 0.8-2.8 ms for the first, 0.1-0.7 ms for each next one; from 16 on
  the two meet at the tick, ~3.6 ms).

``SchedulerCosts`` holds both as curves over the *load*: CPU-bound processes besides the one
measured, per core. Calibration measures them (``testbed.calibration.scheduler``); each curve
is made non-decreasing (``monotone``: more load never shortens a wait; the points are means
of a few noisy samples) and read linearly between its points, flat beyond the last. The
simulated family reads them at the load it simulates at that moment (``simulation.py``): the
spin's overshoot at the spinners per core, each read call's wake at every process wanting a
core per core (bursts of RPC work too: a woken reader waits behind whatever holds the cores),
the processes' background CPU left out: it comes in slivers (Ray's threads, event records) that
never hold a core for a quantum (docs/model.md, "A tenth"). The first call's own curve is
recorded and not read: held out, it made the reads worse (docs/model.md, "A step read's calls,
woken one by one").

Pure: the standard library.
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import Any, Optional, Sequence

from testbed.model.curves import pooled_means

__all__ = ["SchedulerCosts", "monotone", "load_curve_at", "coerce_scheduler"]

Points = tuple[tuple[float, float], ...]


def monotone(points: Sequence[tuple[float, float]]) -> Points:
    """``points`` sorted by load, their values made non-decreasing (``pooled_means``, never below
    0): a dip between two loads is noise, so it is averaged with its neighbours."""
    pts = sorted((float(x), max(0.0, float(y))) for x, y in points)
    return tuple(zip((x for x, _ in pts), pooled_means([y for _, y in pts])))


def load_curve_at(points: Points, load: float) -> float:
    """Linear between the points, the first point's value below it, the last's beyond it;
    0 with no points."""
    if not points:
        return 0.0
    xs = [x for x, _ in points]
    if load <= xs[0]:
        return points[0][1]
    if load >= xs[-1]:
        return points[-1][1]
    i = bisect.bisect_right(xs, load)
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return y0 + (y1 - y0) * (load - x0) / (x1 - x0)


def _points(name: str, raw: Any) -> Points:
    pts = tuple((float(x), float(y)) for x, y in raw)
    for x, y in pts:
        if not (0 <= x < float("inf")) or not (0 <= y < float("inf")):
            raise ValueError(f"scheduler {name}: point ({x}, {y}) needs load >= 0 and seconds >= 0, both finite")
    if len({x for x, _ in pts}) != len(pts):
        raise ValueError(f"scheduler {name}: a load appears twice: {[x for x, _ in pts]}")
    return tuple(sorted(pts))


@dataclasses.dataclass(frozen=True)
class SchedulerCosts:
    """Per load (CPU-bound processes besides this one, per core): how late a busy-wait ends
    (``spin_overshoot_s``) and how long a process woken from a blocking read waits for a core
    (``wake_s``: per read call, the mean over a burst of 8 calls after a spin; ``wake_first_s``:
    the first call of the burst alone); and how late a short sleep ends on the idle node
    (``sleep_overshoot_s``: an emulated apply's sleep under the shard's lock ends that late).
    ``wake_first_s`` is recorded since calibration version 25 (empty before); the simulation
    does not read it."""
    spin_overshoot_s: Points = ()
    wake_s: Points = ()
    wake_first_s: Points = ()
    cores: int = 1                   # cores of the node measured
    spin_s: float = 0.02             # the busy-wait the overshoot was measured on
    samples: int = 0                 # samples per load
    sleep_overshoot_s: float = 0.0   # 0: not measured (before calibration version 24)
    # A call's reply to a caller blocked on it: over how long the callee held the call
    # (seconds, the x of each point), what the call took beyond that, less a call answered at
    # once, on the idle node (calibration version 29; empty before: not modelled).
    reply_wake_s: Points = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "spin_overshoot_s", _points("spin_overshoot_s", self.spin_overshoot_s))
        object.__setattr__(self, "reply_wake_s", _points("reply_wake_s", self.reply_wake_s))
        object.__setattr__(self, "wake_s", _points("wake_s", self.wake_s))
        object.__setattr__(self, "wake_first_s", _points("wake_first_s", self.wake_first_s))
        late = float(self.sleep_overshoot_s)
        if not (late >= 0 and late < float("inf")):
            raise ValueError(f"scheduler: sleep_overshoot_s must be finite and >= 0, got {self.sleep_overshoot_s}")
        object.__setattr__(self, "sleep_overshoot_s", late)


def coerce_scheduler(value: Optional[Any]) -> Optional[SchedulerCosts]:
    """A ``SchedulerCosts`` from itself, a saved dict, or None."""
    if value is None or isinstance(value, SchedulerCosts):
        return value
    if isinstance(value, dict):
        return SchedulerCosts(**value)
    raise TypeError(f"scheduler: expected a mapping, got {type(value).__name__}")
