"""The simulated family: a discrete-event simulation of the testbed's own protocol (SimPy).

``SimWorker.train`` is ``actors/worker.py``'s ``Worker.train`` line for line, on simulated
time; the shards, the step clock and the client are in ``simactors.py``; ``simulate_init``
runs the init phase through the I/O gate of ``actors/gate.py``. ``simulate(spec)`` runs the
train phase of one config and returns its ``SimResult``; ``testbed/model/simfamily.py`` builds
the ``SimSpec`` from the config's ``StepTerms`` and turns results into a ``Prediction``.

The compute jitter is each emulated worker's own (its generator and order of draws, from
the config's seed); exponential service comes from one ``numpy.random.Generator`` the
simulation owns, seeded from the config's seed and the worker count: the same spec gives the
same result. Pure: SimPy, numpy and the standard library.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Generator, Iterator, Optional, Sequence

import numpy as np
import simpy

from testbed.model.scheduler import load_curve_at
from testbed.model.simactors import (
    APPLY,
    PULL_SERVER,
    PUSH_SERVER,
    QUEUE,
    Node,
    Service,
    SimClient,
    SimClock,
    SimShard,
    SimSpec,
)
from testbed.model.simkit import PhaseTimer, SharedRate, Tally, draw_factors

__all__ = ["SimResult", "SimWorker", "simulate", "simulate_init", "WARMUP_FRACTION"]

READ, COMPUTE, PUSH, PULL, BARRIER, RESTART = "read", "compute", "push", "pull", "barrier", "restart"
# The steady rate is counted after every worker has done this fraction of its steps (the
# first steps start in lock step, which is not the steady state of an async run).
WARMUP_FRACTION = 0.25


@dataclasses.dataclass(frozen=True)
class SimResult:
    """One simulation's outcome: the train phase, every phase's mean, utilisations, shares."""
    workers: int
    steps: int
    train_s: float                  # until the last worker's last step
    step_s: float                   # mean step over all workers (their own train time / steps)
    steady_rate_per_s: float        # steps per second over all workers, after the warm-up
    phases: dict[str, float]        # mean per event: read, compute, push, pull, queue, apply, barrier
    server_utilization: float       # mean over shards of the lock's busy fraction
    cpu_utilization: float
    disk_utilization: Optional[float]
    share_s: dict[str, float]       # per step: disk, compute, network, server
    events: int                     # SimPy events scheduled (for the benchmark)
    network_utilization: Optional[float] = None  # mean over shards of the busier link's busy fraction


class SimWorker:
    """Worker ``index`` (``actors/worker.py``'s ``Worker``): its step loop on simulated time."""

    def __init__(self, env: simpy.Environment, spec: SimSpec, index: int, node: Node, client: SimClient,
                 clock: Optional[SimClock], tally: Tally, factors: np.ndarray) -> None:
        self.env, self.spec, self.index, self.node, self.client, self.clock = env, spec, index, node, client, clock
        self.timed = {p: PhaseTimer(env, tally, p) for p in (READ, COMPUTE, PUSH, PULL, BARRIER, RESTART)}
        self.tally = tally
        self.durations = (factors * spec.compute_s).tolist()  # each step's compute: jitter x slowdown
        self.kill_steps = {s for w, s in spec.kill_steps if w == index}
        self.step_ends = np.zeros(spec.steps)
        self.steps_done = 0

    def _woken_read(self) -> Iterator[simpy.Event]:
        """A step read as the device's wake after the pause (``read_wake_s``: this reader's own
        wait, side by side with the other readers'), then its ``read_ops`` blocking calls, each
        its share of the disk and then the wait for a core once woken (``wake``), at the load
        of that moment: every process
        that wants a core, a burst of RPC work as much as a spinner. Background CPU (Ray's
        threads, event records: served unwaited) comes in slivers that never hold a core for a
        quantum: not counted. Call by call, not all at once: in a sync round every worker
        reads at the same moment and the first to finish starts its compute, so the later
        calls of the others wait behind it (docs/model.md, "A step read's calls, woken one by
        one")."""
        spec, env, node = self.spec, self.env, self.node
        cores = node.cores
        ops = max(1, spec.read_ops)
        part = (yield from self._read_wake_up()) / ops
        for _ in range(ops):
            yield node.disk.serve(part)
            wait = load_curve_at(spec.wake, (cores.present - cores.unwaited) / spec.cores)
            if wait > 0:
                yield env.timeout(wait)

    def _read_wake_up(self) -> Generator[simpy.Event, Any, float]:
        """The device's wake after the pause (``read_wake_s``, at most the read): this reader's
        own wait, side by side with the others'. Returns the rest of the read, the disk's work."""
        spec = self.spec
        wake_up = min(spec.read_wake_s, spec.read_s)
        if wake_up > 0:
            yield self.env.timeout(wake_up)
        return spec.read_s - wake_up

    def train(self) -> Iterator[simpy.Event]:
        spec, env, node = self.spec, self.env, self.node
        steps = spec.steps
        pull_every = spec.pull_every
        mode = spec.mode
        # A plain sleep (no background CPU) is one timeout: no generator a step for it.
        plain_sleep = spec.compute_mode == "sleep" and spec.background_s <= 0
        durations, compute_timer = self.durations, self.timed[COMPUTE]
        for step in range(self.steps_done, steps):
            if step in self.kill_steps:  # kill_worker: the process exits, Ray restarts it, it resumes here
                with self.timed[RESTART]:
                    yield env.timeout(spec.restart_s)
            if spec.read_s > 0:
                with self.timed[READ]:
                    if spec.wake:
                        yield from self._woken_read()
                    else:
                        work = yield from self._read_wake_up()
                        if work > 0:
                            yield node.disk.serve(work)
            with compute_timer:
                if plain_sleep:
                    if durations[step] > 0:
                        yield env.timeout(durations[step])
                else:
                    yield from self.compute(step)
            if spec.fill_s > 0:
                yield node.cores.serve(spec.fill_s)  # grad = self.source.fill(step): untimed
            pull_due = (step + 1) % pull_every == 0
            if mode == "sync":
                yield from self._sync_push_pull(step)
            elif mode == "async" and pull_due:
                # The pull that is due travels with the push: one call per shard, split into
                # push and pull where the shards were done with the push (as the worker does).
                t0 = env.now
                pushed = yield from self.client.push_pull(self.index, step)
                self.tally.add(PUSH, pushed - t0)
                self.tally.add(PULL, env.now - pushed)
            else:
                with self.timed[PUSH]:
                    yield from self.client.push(self.index, step)
                if mode == "ssp" and step + 1 < steps:
                    with self.timed[BARRIER]:
                        yield from self.clock.tick(self.index, step + 1)
                if pull_due:
                    with self.timed[PULL]:
                        yield from self.client.pull()
            self.steps_done = step + 1
            self.step_ends[step] = env.now

    def compute(self, step: int) -> Iterator[simpy.Event]:
        """Sleep (no core); spin (a core's share for its duration: the emulator busy-waits until a
        wall-clock deadline, so sharing a core does not stretch it, but it slows everyone else's
        CPU work; it ends late by the calibrated overshoot at the load it starts in, since the
        kernel's quanta are not vanishing); matmul (a fixed amount of work on a core, stretched
        when shared)."""
        if self.spec.background_s > 0:
            # The processes' other CPU (Ray's threads, recording events, the shards' share for this
            # step) runs while the worker computes; nobody waits for it, but it takes a core.
            self.node.cores.serve_unwaited(self.spec.background_s)
        duration = self.durations[step]
        if duration <= 0:
            return
        if self.spec.compute_mode == "sleep":
            yield self.env.timeout(duration)
        elif self.spec.compute_mode == "spin":
            if self.spec.spin_overshoot:
                # The deadline passes while the process waits for its turn: it ends that much late.
                duration += load_curve_at(self.spec.spin_overshoot, self.node.cores.occupants / self.spec.cores)
            yield from self.node.cores.occupy(duration)
        else:
            yield self.node.cores.serve(duration)

    def _sync_push_pull(self, step: int) -> Iterator[simpy.Event]:
        """Push, then pull the parameters as of all N pushes of ``step``, in one call per shard
        (``push_pull_at``), split into ``push``, ``barrier`` and ``pull`` as the worker splits it."""
        t0 = self.env.now
        pushed, released = yield from self.client.push_pull_at(self.index, step, self.spec.workers * (step + 1))
        self.tally.add(PUSH, pushed - t0)
        rest = self.env.now - pushed
        barrier = min(rest, max(0.0, released - pushed))
        self.tally.add(BARRIER, barrier)
        self.tally.add(PULL, rest - barrier)


def _factors(spec: SimSpec) -> np.ndarray:
    """Per worker and step: the jitter factor (sleep and spin; matmul has none) times the
    straggler's slowdown from its first slow step. Worker i's factors are the emulated worker
    i's own draws: its generator (``actors/worker.py``: seeded by the config's seed, 3 and i)
    and its order (one a step), so a config's prediction computes the steps its run computes,
    not another sample of their distribution (a cv of 0.5 over 40 steps moves the sample mean
    by ~8 %)."""
    shape = (spec.workers, spec.steps)
    if spec.compute_mode == "matmul" or spec.jitter_distribution == "none" or spec.jitter_cv == 0:
        factors = np.ones(shape)
    else:
        factors = np.stack([draw_factors(np.random.default_rng([spec.seed, 3, i]), spec.jitter_distribution,
                                         spec.jitter_cv, (spec.steps,)) for i in range(spec.workers)])
    for worker, factor, from_step in spec.stragglers:
        if worker < spec.workers:
            factors[worker, from_step:] *= factor
    return factors


def _steady_rate(ends: np.ndarray, train_s: float) -> float:
    """Step completions per second between the end of every worker's warm-up and the first
    worker's last step (all still running); the whole run's rate when that window is empty."""
    workers, steps = ends.shape
    warm = int(steps * WARMUP_FRACTION)
    if steps >= 8:
        t1, t2 = float(ends[:, warm - 1].max()), float(ends[:, -1].min())
        if t2 > t1:
            done = np.count_nonzero((ends > t1) & (ends <= t2))
            return done / (t2 - t1)
    return workers * steps / train_s


def simulate(spec: SimSpec) -> SimResult:
    """Run the train phase of ``spec``: N workers from step 0 at time 0 (the driver starts
    them together after init), until the last one has done its last step."""
    env = simpy.Environment()
    rng = np.random.default_rng([spec.seed, 7, spec.workers])
    node = Node(env, spec)
    shard_tally, worker_tally = Tally(), Tally()
    service = Service(rng, spec.service == "exponential")
    shards = [SimShard(env, spec, s, node, shard_tally, service) for s in range(spec.servers)]
    clock = SimClock(env, spec.workers, spec.staleness, spec.call_s, node, spec.clock_cpu_s,
                     spec.clock_cpu_busy_s, spec.tick_cpu_s) if spec.mode == "ssp" else None
    client = SimClient(env, spec, node, shards)
    factors = _factors(spec)
    workers = [SimWorker(env, spec, i, node, client, clock, worker_tally, factors[i]) for i in range(spec.workers)]
    for w in workers:
        env.process(w.train())
    env.run()
    train_s = env.now
    ends = np.stack([w.step_ends for w in workers])
    tally = worker_tally
    tally.merge(shard_tally)
    phases = {p: tally.mean(p) for p in (READ, COMPUTE, PUSH, PULL, QUEUE, APPLY, BARRIER)}
    k = spec.pull_every
    pulls_per_step = 1.0 if spec.mode == "sync" else 1.0 / k
    server = tally.mean(PUSH_SERVER) + tally.mean(PULL_SERVER) * pulls_per_step + phases[BARRIER]
    network = (phases[PUSH] - tally.mean(PUSH_SERVER)) + (phases[PULL] - tally.mean(PULL_SERVER)) * pulls_per_step
    share = {"disk": phases[READ], "compute": phases[COMPUTE] + spec.fill_s, "network": max(0.0, network),
             "server": server}
    return SimResult(
        workers=spec.workers, steps=spec.steps, train_s=train_s, step_s=float(ends[:, -1].mean()) / spec.steps,
        steady_rate_per_s=_steady_rate(ends, train_s), phases=phases,
        server_utilization=sum(s.busy_s for s in shards) / (len(shards) * train_s) if train_s > 0 else 0.0,
        cpu_utilization=node.cores.utilization(train_s),
        disk_utilization=node.disk.utilization(train_s) if spec.read_s > 0 else None,
        share_s=share, events=next(env._eid),  # SimPy's own counter of scheduled events
        network_utilization=_link_utilization(shards, train_s),
    )


def _link_utilization(shards: Sequence[SimShard], train_s: float) -> Optional[float]:
    """Mean over shards of the busier of each shard's two links (None when unshaped)."""
    if not shards or shards[0].link_in is None or shards[0].link_out is None:
        return None
    return sum(max(s.link_in.utilization(train_s), s.link_out.utilization(train_s)) for s in shards) / len(shards)


class _Gate:
    """The I/O gate (``actors/gate.py``): one token, handed on in worker order."""

    def __init__(self, env: simpy.Environment, order: Sequence[int]) -> None:
        self._turn = {w: env.event() for w in order}
        self._next = dict(zip(order, list(order[1:]) + [None]))
        self._turn[order[0]].succeed()

    def acquire(self, worker: int) -> simpy.Event:
        return self._turn[worker]

    def release(self, worker: int) -> None:
        following = self._next[worker]
        if following is not None:
            self._turn[following].succeed()


def simulate_init(workers: int, read_s: float, rate: Callable[[int], float], top_rate: float,
                  sequential: bool, call_s: float, gate_s: Callable[[int], float], start_s: float = 0.0) -> float:
    """The init phase: the driver's call ``call_s``, then every worker reads ``read_s`` of work
    alone on the disk, through the gate one after another or all at once, sharing the disk by
    its concurrency curve ``rate``. Through the gate (``sequential``), ``gate_s(k)`` is what the
    gate's first k turns cost beyond the reads (``terms.init_gate_s``): worker i's turn, taking
    the token and handing it on, is ``gate_s(i + 1) - gate_s(i)``, spent on the critical path
    before its read. ``start_s``: what each read costs before its bytes (the first read after
    idle, ``DiskProfile.read_start_s``), a wait of its own, not the disk's (inside the token's
    hold when sequential)."""
    if read_s <= 0:
        return call_s
    env = simpy.Environment()
    disk = SharedRate(env, rate, top_rate)
    gate = _Gate(env, list(range(workers))) if sequential else None

    def reader(index: int) -> Iterator[simpy.Event]:
        if gate is not None:
            yield gate.acquire(index)          # init_wait
            yield env.timeout(max(0.0, gate_s(index + 1) - gate_s(index)))  # the turn
        if start_s > 0:
            yield env.timeout(start_s)         # init_read: the first read after idle
        yield disk.serve(read_s)               # init_read
        if gate is not None:
            gate.release(index)

    for i in range(workers):
        env.process(reader(i))
    env.run()
    return call_s + env.now
