"""The step clock of stale-synchronous parallel (``ssp``) training, and its Ray wrapper.

Each worker reports how many steps it has completed (its push applied on every
shard) and, before it starts its next step, waits until it is at most ``staleness``
steps ahead of the slowest worker:

    completed(me) - min over workers of completed(w) <= staleness

With ``staleness`` 0 this is a barrier per step. The slowest worker never waits, so
the clock cannot deadlock while every worker is alive; a wait that lasts longer than
``timeout_s`` (a worker failed) raises ``TimeoutError`` instead of hanging.

Why a separate actor rather than the shards: a shard sees its own applies but not
whether a worker's push reached every shard, and with S shards one of them would
have to become the coordinator anyway. The clock holds N integers, is called once per
step per worker in ``ssp`` only, and never in ``async`` or ``sync``.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["StepClock", "ClockActor"]


class StepClock:
    """Completed-step counts of ``workers`` workers, and the wait that bounds how far apart they get."""

    def __init__(self, workers: int, staleness: int, timeout_s: float = 300.0) -> None:
        if workers < 1 or staleness < 0:
            raise ValueError(f"need workers >= 1 and staleness >= 0, got {workers}, {staleness}")
        self.staleness = staleness
        self.timeout_s = timeout_s
        self.completed = [0] * workers
        self._changed = threading.Condition()
        self.waits = 0        # ticks that had to wait (for tests and stats)
        self.max_lead = 0     # the largest completed(me) - min seen when a wait ended

    def tick(self, worker: int, completed: int) -> bool:
        """Record that ``worker`` has completed ``completed`` steps, then block until it may start
        the next one. Returns whether it had to wait."""
        with self._changed:
            if not 0 <= worker < len(self.completed):
                raise ValueError(f"worker {worker} is not one of the {len(self.completed)} workers")
            if completed < self.completed[worker]:
                raise ValueError(f"worker {worker}: completed steps went back from {self.completed[worker]} "
                                 f"to {completed}")
            self.completed[worker] = completed
            self._changed.notify_all()
            ok = lambda: completed - min(self.completed) <= self.staleness  # noqa: E731
            waited = not ok()
            if waited and not self._changed.wait_for(ok, timeout=self.timeout_s):
                slowest = self.completed.index(min(self.completed))
                raise TimeoutError(
                    f"worker {worker} waited {self.timeout_s:g}s to start step {completed}: worker {slowest} is "
                    f"stuck at {min(self.completed)} completed steps (staleness {self.staleness}); it has failed "
                    f"or stalled")
            self.waits += waited
            self.max_lead = max(self.max_lead, completed - min(self.completed))
            return waited

    def stats(self) -> dict[str, Any]:
        with self._changed:
            return {"completed": list(self.completed), "waits": self.waits, "max_lead": self.max_lead}


class ClockActor:
    """Thin Ray wrapper around ``StepClock``; made remote (threaded: one thread per waiting
    worker) by ``testbed.runner.run``."""

    def __init__(self, workers: int, staleness: int, timeout_s: float = 300.0) -> None:
        self.clock = StepClock(workers, staleness, timeout_s)

    def ready(self) -> dict[str, Any]:
        from actors.host import node_identity
        return node_identity()

    def tick(self, worker: int, completed: int) -> bool:
        return self.clock.tick(worker, completed)

    def stats(self) -> dict[str, Any]:
        return self.clock.stats()
