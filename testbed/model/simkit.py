"""Building blocks of the simulated family: a processor-sharing resource, phase tallies and
the compute jitter, all on SimPy (the environment is handed in, never global).

Terms (as in docs/model.md):

- *shared-rate resource* (``SharedRate``): a resource that serves every job present at once,
  splitting a total rate ``rate(j)`` equally among the ``j`` jobs (egalitarian processor
  sharing). The node's cores are one (``rate(j) = min(j, K)``: up to K bursts run at full
  speed, more time-share the K cores, the limit of round-robin with vanishing quanta); the
  disk is another (``rate(j) = B(j) / B(1)``, the measured aggregate bandwidth of j readers).
  A job's *work* is its duration alone on the resource, so a burst of ``w`` seconds of CPU
  takes ``w`` seconds when the cores are free and longer when they are not. An *occupant*
  (``occupy``) is there for a fixed wall-clock time whatever its share: the emulator's
  ``spin`` compute, which busy-waits until a deadline, takes a core's share from the others
  but is never stretched itself.
- *tally*: the sum and count of one phase's events, so a phase's mean is what the measured
  summary reports as ``<phase>_mean_s``.

Pure: SimPy, numpy and the standard library.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import Callable, Iterator, Optional

import numpy as np
import simpy

__all__ = ["SharedRate", "Mutex", "Tally", "PhaseTimer", "draw_factors", "multipliers_rate", "cores_rate"]

# Relative slack when deciding that a job's work is done: the virtual clock is a sum of
# products, and a job must not wait for a second timer over a rounding error.
_EPS = 1e-12


def cores_rate(cores: int) -> Callable[[int], float]:
    """rate(j) = min(j, K): up to K jobs at full speed, more share K cores."""
    return lambda j: float(j if j < cores else cores)


def multipliers_rate(multipliers: tuple[float, ...] | Callable[[int], float]) -> Callable[[int], float]:
    """rate(j) = alpha(j), the j-th multiplier (flat past the last one), or a callable."""
    if callable(multipliers):
        return multipliers
    alphas = tuple(float(a) for a in multipliers) or (1.0,)
    last = alphas[-1]
    return lambda j: alphas[j - 1] if j <= len(alphas) else last


class SharedRate:
    """Processor sharing: the ``j`` jobs present each progress at ``rate(j) / j``.

    Kept as a virtual clock (the work each present job has received since the resource was
    created): a job arriving at virtual time ``v`` with work ``w`` leaves at ``v + w``, so one
    heap of finish marks and one pending timer serve any number of jobs. A timer made stale
    by an arrival or a departure is ignored when it fires (it is no longer the pending one).
    """

    def __init__(self, env: simpy.Environment, rate: Callable[[int], float], top_rate: float) -> None:
        self.env = env
        self.rate = rate
        self.top_rate = top_rate        # the largest rate(j): the utilisation's denominator
        self._jobs: list[tuple[float, int, Optional[simpy.Event]]] = []  # (finish mark, sequence, done)
        self._virtual = 0.0
        self._stamp = env.now
        self._seq = 0
        self._timer: Optional[simpy.Event] = None  # the pending timer: any other that fires is stale
        self._wake_at: float | None = None  # when the pending timer fires
        self._occupants = 0             # present for a fixed time: they share the rate, need no timer
        self._unwaited = 0              # jobs present that nobody waits for (``serve_unwaited``)
        self._total = 0.0               # rate(j) and rate(j) / j for the j present now, set when j changes
        self._per_job = 0.0
        self.served = 0.0               # integral of rate(j) dt: work done, for the utilisation

    def _advance(self) -> None:
        """Bring the virtual clock and the work done up to now (at the speed since the last change)."""
        now = self.env.now
        elapsed = now - self._stamp
        if elapsed:
            self._virtual += elapsed * self._per_job
            self.served += elapsed * self._total
            self._stamp = now

    def _set_speed(self) -> None:
        """The number present changed: the speed each job now progresses at."""
        j = len(self._jobs) + self._occupants
        if j:
            total = self._total = self.rate(j)
            self._per_job = total / j
        else:
            self._total = self._per_job = 0.0

    def occupy(self, duration_s: float):
        """A process (``yield from``) that is present for ``duration_s`` of simulated time,
        taking its share of the rate from the jobs present, and leaves on time."""
        if duration_s <= 0:
            return
        self._advance()
        self._occupants += 1
        self._set_speed()
        self._reschedule()
        try:
            yield self.env.timeout(duration_s)
        finally:
            self._advance()
            self._occupants -= 1
            self._set_speed()
            self._reschedule()

    @property
    def occupants(self) -> int:
        """Occupants present now (on the cores: the processes spinning)."""
        return self._occupants

    @property
    def present(self) -> int:
        """Everything present now: the jobs being served and the occupants (on the cores: every
        process that wants a core, bursting or spinning)."""
        return len(self._jobs) + self._occupants

    @property
    def unwaited(self) -> int:
        """Jobs present that nobody waits for (on the cores: the processes' background CPU)."""
        return self._unwaited

    def _reschedule(self) -> None:
        """The jobs' speed changed both ways: drop the pending timer and set a new one."""
        self._timer = None
        self._wake_at = None
        self._schedule()

    def _arrive(self, work_s: float, done: Optional[simpy.Event]) -> None:
        self._advance()
        heapq.heappush(self._jobs, (self._virtual + work_s, self._seq, done))
        self._seq += 1
        if done is None:
            self._unwaited += 1
        self._set_speed()
        self._schedule()

    def serve(self, work_s: float) -> simpy.Event:
        """An event that fires when ``work_s`` seconds of work (at rate 1) are done."""
        done = self.env.event()
        if work_s <= 0:
            done.succeed()
        else:
            self._arrive(work_s, done)
        return done

    def serve_unwaited(self, work_s: float) -> None:
        """``work_s`` of work that takes its share but that nobody waits for (no event fires
        when it is done: the process's background CPU)."""
        if work_s > 0:
            self._arrive(work_s, None)

    def _schedule(self) -> None:
        if not self._jobs:
            return
        now = self.env.now
        ahead = self._jobs[0][0] - self._virtual
        fire = now + ahead / self._per_job if ahead > 0 else now
        if self._wake_at is not None and self._wake_at <= fire:
            # The pending timer fires no later than needed: keep it (if early, it finds no job
            # done and sets the next one). Arrivals that slow everyone cost no new timer.
            return
        self._wake_at = fire
        timer = self._timer = self.env.timeout(fire - now)
        timer.callbacks.append(self._expire)

    def _expire(self, timer: simpy.Event) -> None:
        if timer is not self._timer:
            return  # made stale by a change of speed since it was set
        self._timer = None
        self._wake_at = None
        self._advance()
        limit = self._virtual + _EPS * max(1.0, abs(self._virtual))
        jobs = self._jobs
        finished = []
        while jobs and jobs[0][0] <= limit:
            done = heapq.heappop(jobs)[2]
            if done is not None:
                finished.append(done)
            else:
                self._unwaited -= 1
        self._set_speed()
        self._schedule()
        for done in finished:
            _fire_now(done)

    def utilization(self, elapsed_s: float) -> float:
        """Work done over what the top rate could have done in ``elapsed_s``."""
        self._advance()
        return self.served / (elapsed_s * self.top_rate) if elapsed_s > 0 and self.top_rate > 0 else 0.0


def _fire_now(event: simpy.Event) -> None:
    """Succeed ``event`` and run its callbacks (the waiting process) at once: what SimPy's
    ``Environment.step`` does when it takes the event off its queue at this same instant,
    without the round trip through the queue. Only from a timer's callback (never inside a
    process), with the resource's state already settled."""
    event._ok = True
    event._value = None
    callbacks, event.callbacks = event.callbacks, None
    for callback in callbacks:
        callback(event)


class Mutex:
    """A lock one process holds at a time, handed on first come first served (a shard's lock,
    the step clock's one thread), or to a waiter drawn at random (a shard's interpreter: which
    waiting thread CPython's GIL goes to is the OS's choice, not an order).

    ``simpy.Resource(1)`` does the same with two events per hold (the request's and the
    release's) and its queue machinery; here taking a free lock yields nothing and handing
    it on schedules one event (the next holder's). The 1024 x 100 benchmark holds a lock
    twice a step per worker: docs/model.md gives the figures.
    """

    __slots__ = ("env", "held", "_waiting", "rng", "_draws")

    def __init__(self, env: simpy.Environment, rng: Optional[np.random.Generator] = None) -> None:
        self.env = env
        self.rng = rng                  # None: first come first served; else each hand-on drawn
        self._draws: list[float] = []
        self.held = False
        self._waiting: deque[simpy.Event] = deque()

    def take(self) -> Iterator[simpy.Event]:
        """Take the lock (``yield from``): at once when it is free, else when it is handed on."""
        if not self.held:
            self.held = True
            return
        turn = self.env.event()
        self._waiting.append(turn)
        yield turn

    def release(self) -> None:
        """Let it go: to the first waiting (or, with ``rng``, to one drawn at random among them),
        who holds it from now; or free."""
        waiting = self._waiting
        if not waiting:
            self.held = False
        elif self.rng is None or len(waiting) == 1:
            waiting.popleft().succeed()
        else:
            if not self._draws:
                self._draws = self.rng.random(1024).tolist()
            i = int(self._draws.pop() * len(waiting))
            turn = waiting[i]
            del waiting[i]
            turn.succeed()


class Tally:
    """Sum and count per phase (the simulated events are never kept one by one)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, phase: str, duration_s: float) -> None:
        self.sums[phase] = self.sums.get(phase, 0.0) + duration_s
        self.counts[phase] = self.counts.get(phase, 0) + 1

    def mean(self, phase: str) -> float:
        n = self.counts.get(phase, 0)
        return self.sums[phase] / n if n else 0.0

    def merge(self, other: "Tally") -> None:
        for phase, total in other.sums.items():
            self.sums[phase] = self.sums.get(phase, 0.0) + total
            self.counts[phase] = self.counts.get(phase, 0) + other.counts[phase]


class PhaseTimer:
    """``with timer:`` adds the simulated time of the block to one phase of a tally, as
    ``EventRecorder.timed`` does in the real worker. One per actor and phase (an actor is
    in one phase at a time), so timing allocates nothing."""

    __slots__ = ("env", "tally", "phase", "start")

    def __init__(self, env: simpy.Environment, tally: Tally, phase: str) -> None:
        self.env, self.tally, self.phase, self.start = env, tally, phase, 0.0

    def __enter__(self) -> "PhaseTimer":
        self.start = self.env.now
        return self

    def __exit__(self, *exc: object) -> None:
        self.tally.add(self.phase, self.env.now - self.start)


def draw_factors(rng: np.random.Generator, distribution: str, cv: float, shape: tuple[int, ...]) -> np.ndarray:
    """Jitter factors of mean 1 and coefficient of variation ``cv``, drawn as
    ``testbed.emulation.compute.ComputePlan.factor`` draws them (never negative)."""
    if distribution == "none" or cv == 0:
        return np.ones(shape)
    if distribution == "uniform":
        a = min(cv * math.sqrt(3.0), 1.0)
        return rng.uniform(1 - a, 1 + a, size=shape)
    if distribution == "normal":
        return np.maximum(0.0, rng.normal(1.0, cv, size=shape))
    if distribution == "lognormal":
        sigma = math.sqrt(math.log1p(cv * cv))
        return rng.lognormal(-sigma * sigma / 2, sigma, size=shape)
    if distribution == "exponential":
        return np.maximum(0.0, 1.0 + cv * (rng.exponential(1.0, size=shape) - 1.0))
    raise ValueError(f"unknown jitter distribution {distribution!r}")
