"""The simulated family's actors besides the worker: shards, the step clock, a worker's
client, on simulated time (the worker's step loop and the run are in ``simulation.py``).

They read like the real ones, line for line: ``SimShard.push`` / ``pull`` / ``pull_at`` are
``actors/server.py``'s, ``SimClock.tick`` is ``actors/clock.py``'s, ``SimClient`` is
``actors/worker.py``'s ``RayServerClient``. What each call costs comes from ``SimSpec``, built
from the same ``StepTerms`` as every family (``testbed/model/simfamily.py``):

- every CPU burst (a worker's RPC work and gradient production, a shard's dispatch, apply
  and copy, spin and matmul compute) is served by the node's cores, a processor-sharing
  resource of K cores (``SharedRate``), so N workers and S shards time-share them;
- a shard applies pushes one at a time under its lock (a first-come ``Mutex``) and its apply
  needs a core while it holds the lock, so a saturated CPU stretches the lock's hold time;
- step reads share the disk by its measured concurrency curve;
- shaped links (docs/network.md): each shard's inbound and outbound link is a processor-sharing
  resource of rate 1 (a slice's work is its bytes over the bandwidth); a push waits its slice at
  the inbound link before the lock, a pull (alone, with a push, or at the sync barrier) its
  slice at the outbound link after the copy, each followed by the latency; a worker's own link
  carries only its own transfer, so it is a floor on the call's end: M / B after it began;
- ``sync``: a pull of version N (k + 1) waits at each shard until all N pushes of the step are
  applied; ``ssp``: a step clock holds a worker more than ``staleness`` steps ahead.

Pure: SimPy, numpy and the standard library.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, Optional

import numpy as np
import simpy

from testbed.model.scheduler import load_curve_at
from testbed.model.simkit import Mutex, SharedRate, Tally, cores_rate, multipliers_rate

__all__ = ["SimSpec", "Node", "Service", "SimShard", "SimClock", "SimClient", "QUEUE", "APPLY", "PUSH_SERVER",
           "PULL_SERVER"]

QUEUE, APPLY, PUSH_SERVER, PULL_SERVER = "queue", "apply", "push_server", "pull_server"


@dataclasses.dataclass(frozen=True)
class SimSpec:
    """What one simulation needs, in seconds of work alone (CPU parts at one core's speed)."""
    workers: int
    servers: int
    steps: int
    pull_every: int
    mode: str                       # async, sync, ssp
    staleness: int
    compute_s: float
    compute_mode: str               # sleep (no core), spin, matmul (a core; matmul has no jitter)
    jitter_distribution: str
    jitter_cv: float
    read_s: float                   # one step's read alone on the disk
    read_multipliers: tuple[float, ...]
    fill_s: float                   # producing the gradient (CPU, untimed)
    push_cpu_s: float               # a worker's side of a push: CPU part and the rest (latency, wire)
    push_wire_s: float
    pull_cpu_s: float
    pull_wire_s: float
    overhead_s: float               # o: a shard's dispatch of one call, outside the lock (CPU)
    apply_cpu_s: float              # the apply's CPU part, under the lock
    apply_sleep_s: float            # the emulated part of the apply (apply_seconds / S), slept under the lock
    copy_s: float                   # a pull's copy under the lock (CPU)
    background_s: float             # CPU per step beyond the bursts above (the worker's beyond its transfers,
                                    # the shards' beyond their services), not waited for: runs during compute
    cores: int
    call_s: float                   # one actor call (the step clock)
    restart_s: float                # an actor's restart after a kill
    seed: int
    stragglers: tuple[tuple[int, float, int], ...] = ()   # (worker, factor, from_step)
    kill_steps: tuple[tuple[int, int], ...] = ()          # (worker, step)
    kill_updates: tuple[tuple[int, int], ...] = ()        # (shard, update)
    service: str = "deterministic"  # or "exponential": every apply and copy drawn Exp(mean)
    link_slice_s: float = 0.0       # (M/S) / B: a slice alone on a shard's link (0: unshaped)
    link_worker_s: float = 0.0      # M / B: a whole gradient (or the parameters) on a worker's own link
    link_latency_s: float = 0.0     # L: charged at the shard's end of every transfer, after its bytes
    # The scheduler under load (testbed.model.scheduler), as (load, seconds) points over CPU-bound
    # processes per core; empty: not modelled. A spin ends late by the overshoot at the load when
    # it starts (spinners per core); a step read's each of ``read_ops`` blocking calls, after its
    # share of the disk, waits the wake at the load then (every process present at the cores,
    # bursts too, per core).
    spin_overshoot: tuple[tuple[float, float], ...] = ()
    wake: tuple[tuple[float, float], ...] = ()
    read_ops: int = 1
    # Of ``read_s``, the device's wake after the pause: waited by each reader before its calls,
    # side by side with the others; only the rest is served on the shared disk.
    read_wake_s: float = 0.0
    # A pull's reply: the parameters carried out (serialised, or put into the object store, once
    # per call), the copy's CPU less the memory copy. A sync pull that shares the round's
    # snapshot copies nothing but pays its reply (under the lock: the woken calls take it in
    # turn); with ``reply_outside``, every other pull's copy is the memory copy under the lock
    # and then the reply after it, holding the shard's interpreter.
    reply_s: float = 0.0
    # The ssp step clock's CPU per tick, served in turn at the clock's process on the cores
    # (calibrated: a bare actor call's callee CPU, after a pause and queued); 0: the tick is
    # the call latency alone, as before calibration measured it.
    clock_cpu_s: float = 0.0
    clock_cpu_busy_s: float = 0.0
    # The worker's own CPU for its tick (calibrated: a bare call's caller CPU after a pause),
    # served on the cores within the call's latency; 0: that part of the tick takes no core.
    tick_cpu_s: float = 0.0
    # The shard's interpreter lock (GIL): a call's dispatch holds it, and the applying thread,
    # back from the emulated apply's sleep (which lets it go), waits for it before it goes on
    # with the lock still held (False: not modelled; docs/model.md, "An eighth").
    gil: bool = False
    # A pull's reply (``reply_s`` of its copy) after the shard's lock, holding its interpreter
    # (``gil``), as ``ParameterServer`` returns the copy it made under the lock (False: the whole
    # copy under the lock; docs/model.md, "A ninth").
    reply_outside: bool = False
    # A plain push's answer (a push whose pull is not due is a call of its own, timed until its
    # small answer is back): CPU part and the rest, after the shards were done with it.
    push_return_cpu_s: float = 0.0
    push_return_wire_s: float = 0.0
    # A shard's dispatch of a call that finds it serving another (a call in its process:
    # dispatched, waiting for the lock, applying, copying or replying): a process already
    # awake spends less on a call than one woken from idle (calibrated: a bare call's callee
    # CPU queued against paused), and the saving is in the call's fixed part, not its bytes.
    # None: the same as ``overhead_s`` (not modelled).
    overhead_busy_s: Optional[float] = None
    # The dispatch of a pull that is a call of its own (every ``ssp`` pull), idle and busy: it
    # carries no argument to take, so a bare call's (calibrated: a bare call's callee CPU paused
    # and queued), where a push's dispatch takes its slice. None: ``overhead_s`` and
    # ``overhead_busy_s`` (profiles without the bare call's figures).
    pull_dispatch_s: Optional[float] = None
    pull_dispatch_busy_s: Optional[float] = None
    # How the shard's interpreter (``gil``) is handed on among the threads waiting for it:
    # "fifo", first come first served; "random", to one drawn at random (seeded by the config's
    # seed and the shard): CPython wakes one of the waiting threads, the OS's choice, and a
    # returning call's reply does not wait for every dispatch queued before it (docs/model.md,
    # "A shard's interpreter, handed on at random").
    gil_handoff: str = "fifo"
    # A reply that finds its caller long blocked (``SchedulerCosts.reply_wake_s``): over how long
    # the call was held at the shards, the seconds beyond a call answered at once, as
    # (held_s, seconds) points; the calibrated calls already hold the wake of a call held as
    # long as one alone is (``*_alone_s``, the shards' services of that call at one worker
    # without the emulated apply's sleep), so a call pays only the wake beyond that. Taken while
    # a core is idle (a blocked process's core idles and its wake-up costs; with every core
    # busy the caller waits for its turn instead, which this does not hold). Empty: not modelled.
    reply_wake: tuple[tuple[float, float], ...] = ()
    push_alone_s: float = 0.0       # a plain push's shard time alone (dispatch and apply CPU)
    push_pull_alone_s: float = 0.0  # a push with its pull (dispatch, apply CPU, copy)
    pull_alone_s: float = 0.0       # a pull of its own (dispatch and copy)
    # Ray's object store (the raylet) works for every slice past the inline limit that a call
    # carries: the CPU of one transfer's slices (a push's: the worker's put, the shard's get; a
    # pull's: the shard's put, the worker's get), served on the cores beside the call: a push's
    # from its start, beside the worker's side, the shards starting once both are done (a put
    # is over when the store has the object); a pull's as the worker's side of the reply starts,
    # nobody waiting for it (docs/model.md, "A push's put waits for the store's work"). It is the
    # part of Ray's CPU per step that grows with the gradient; the rest stays in
    # ``background_s``. 0: not modelled (all in the background).
    store_s: float = 0.0


class Node:
    """The shared hardware: the cores and the disk."""

    def __init__(self, env: simpy.Environment, spec: SimSpec) -> None:
        self.cores = SharedRate(env, cores_rate(spec.cores), float(spec.cores))
        self.disk = SharedRate(env, multipliers_rate(spec.read_multipliers), max(spec.read_multipliers))


class Service:
    """The lengths of a shard's applies and copies: as given, or exponential of that mean."""

    def __init__(self, rng: np.random.Generator, exponential: bool) -> None:
        self.rng, self.exponential = rng, exponential
        self._draws: list[float] = []

    def factor(self) -> float:
        if not self.exponential:
            return 1.0
        if not self._draws:
            self._draws = self.rng.exponential(1.0, size=4096).tolist()
        return self._draws.pop()


class SimShard:
    """One parameter-server shard (``actors/server.py``'s ``ParameterServer``) on simulated time."""

    def __init__(self, env: simpy.Environment, spec: SimSpec, shard: int, node: Node, tally: Tally,
                 service: Service) -> None:
        self.env, self.spec, self.shard, self.node, self.tally, self.service = env, spec, shard, node, tally, service
        self.lock = Mutex(env)
        self.gil = Mutex(env, np.random.default_rng([spec.seed, 13, shard]) if spec.gil_handoff == "random" else None) \
            if spec.gil else None
        self.version = 0
        self.calls = 0                         # calls in the shard's process now
        self.busy_s = 0.0                      # time the lock was held
        self._reached: dict[int, simpy.Event] = {}  # version -> event of the pulls waiting for it
        self._snapshot = -1
        self.kill_updates = {u for s, u in spec.kill_updates if s == shard}
        # The shard's links, only when shaped: an unshaped run schedules no event for them.
        shaped = spec.link_slice_s > 0
        self.link_in = SharedRate(env, cores_rate(1), 1.0) if shaped else None
        self.link_out = SharedRate(env, cores_rate(1), 1.0) if shaped else None
        self.links_shaped = shaped or spec.link_latency_s > 0

    def _link(self, link: SharedRate | None) -> Iterator[simpy.Event]:
        """One slice through one of the shard's links (its share of the bandwidth), then the latency."""
        if link is not None:
            yield link.serve(self.spec.link_slice_s)
        if self.spec.link_latency_s > 0:
            yield self.env.timeout(self.spec.link_latency_s)

    def _work(self, cpu_s: float, sleep_s: float) -> Iterator[simpy.Event]:
        f = self.service.factor()
        if cpu_s > 0:
            yield self.node.cores.serve(cpu_s * f)
        if sleep_s > 0:
            yield self.env.timeout(sleep_s * f)
        if self.gil is not None and sleep_s > 0:
            # Back from the sleep (which lets the interpreter go): wait for it.
            yield from self.gil.take()
            self.gil.release()

    def _copy_locked(self) -> Iterator[simpy.Event]:
        """A pull's copy under the lock (the caller holds it): the memory copy alone when the
        reply follows outside the lock."""
        spec = self.spec
        if spec.reply_outside and self.gil is not None:
            yield from self._work(max(0.0, spec.copy_s - spec.reply_s), 0.0)
        else:
            yield from self._work(spec.copy_s, 0.0)

    def _reply(self) -> Iterator[simpy.Event]:
        """A pull's reply, after the lock: Ray serialises the returned copy in the shard's
        process, which holds its interpreter, so it takes its turn among the threads waiting
        for it (``gil_handoff``)."""
        spec = self.spec
        if spec.reply_outside and self.gil is not None and spec.reply_s > 0:
            yield from self.gil.take()
            yield self.node.cores.serve(spec.reply_s * self.service.factor())
            self.gil.release()

    def _dispatch(self, busy: bool, plain_pull: bool = False) -> Iterator[simpy.Event]:
        """A call's dispatch on a core, outside the lock (holding the interpreter, if modelled);
        ``busy``: the call found the shard serving another; ``plain_pull``: a pull of its own
        (``pull_dispatch_s``, where given)."""
        spec = self.spec
        idle, busy_cost = ((spec.pull_dispatch_s, spec.pull_dispatch_busy_s)
                           if plain_pull and spec.pull_dispatch_s is not None
                           else (spec.overhead_s, spec.overhead_busy_s))
        cost = busy_cost if busy and busy_cost is not None else idle
        if self.gil is None:
            yield self.node.cores.serve(cost)
            return
        yield from self.gil.take()
        yield self.node.cores.serve(cost)
        self.gil.release()

    def push(self, worker: int, step: int, copy: bool = False) -> Iterator[simpy.Event]:
        """Apply one push under the lock; with ``copy``, the pull that is due travels with it
        (``push_pull``: the parameters are copied in the same lock hold, with no second call).
        Returns the time the push was done (where the worker splits the call into push and pull)."""
        env, spec = self.env, self.spec
        t_call = env.now
        self.calls += 1
        if spec.overhead_s > 0:
            yield from self._dispatch(self.calls > 1)  # the call's dispatch, outside the lock
        link_s = 0.0
        if self.links_shaped:
            # The slice's bytes through the inbound link, before the lock (a push waiting for the
            # link does not hold it): the push's network time, not the shard's service.
            t_link = env.now
            yield from self._link(self.link_in)
            link_s = env.now - t_link
        arrive = env.now
        yield from self.lock.take()
        if self.version in self.kill_updates:     # kill_server: down until Ray has restarted it
            self.kill_updates.discard(self.version)
            yield env.timeout(spec.restart_s)
        start = env.now
        yield from self._work(spec.apply_cpu_s, spec.apply_sleep_s)
        self.version += 1
        self.busy_s += env.now - start
        self.tally.add(QUEUE, start - arrive)
        self.tally.add(APPLY, env.now - start)
        reached = self._reached.pop(self.version, None)
        if reached is not None:
            reached.succeed()
        pushed = env.now
        if copy:
            yield from self._copy_locked()
            self.busy_s += env.now - pushed
        self.lock.release()
        self.tally.add(PUSH_SERVER, pushed - t_call - link_s)
        if copy:
            yield from self._reply()
            self.tally.add(PULL_SERVER, env.now - pushed)
        self.calls -= 1
        if copy and self.links_shaped:
            yield from self._link(self.link_out)  # the pulled slice leaves, outside the lock
        return pushed

    def pull(self) -> Iterator[simpy.Event]:
        env = self.env
        t_call = env.now
        self.calls += 1
        if self.spec.overhead_s > 0 or self.spec.pull_dispatch_s:
            yield from self._dispatch(self.calls > 1, plain_pull=True)
        yield from self.lock.take()
        start = env.now
        yield from self._copy_locked()
        self.busy_s += env.now - start
        self.lock.release()
        yield from self._reply()
        self.calls -= 1
        self.tally.add(PULL_SERVER, env.now - t_call)
        if self.links_shaped:
            yield from self._link(self.link_out)

    def pull_at(self, version: int) -> Iterator[simpy.Event]:
        """Wait until ``version`` updates are applied; the first pull of a version copies the
        parameters, the others share that snapshot (and pay their reply alone, ``reply_s``).
        Returns the seconds waited (the barrier).
        It travels with a push (``push_pull_at``): no call, so no dispatch, of its own."""
        env = self.env
        t_call = t0 = env.now
        if self.version < version:
            reached = self._reached.get(version)
            if reached is None:
                reached = self._reached[version] = env.event()
            yield reached
        shared = False
        yield from self.lock.take()
        waited = env.now - t0
        if self._snapshot != version:
            start = env.now
            yield from self._work(self.spec.copy_s, 0.0)
            self._snapshot = version
            self.busy_s += env.now - start
        else:
            shared = True
        self.lock.release()
        if shared and self.spec.reply_s > 0:
            # Its own reply, one woken call at a time (the shard's interpreter takes them in
            # turn), after the wait: the shard records the wait until it holds the lock again
            # and returns the snapshot after letting it go (actors/server.py ``pull_at``), so a
            # call's turn behind the earlier replies is its pull's, not its barrier's.
            yield from self.lock.take()
            yield self.node.cores.serve(self.spec.reply_s * self.service.factor())
            self.lock.release()
        self.tally.add(PULL_SERVER, env.now - t_call - waited)
        if self.links_shaped:
            yield from self._link(self.link_out)
        return waited


class SimClock:
    """The ``ssp`` step clock (``actors/clock.py``): a worker more than ``staleness`` steps ahead
    of the slowest waits. The minimum is kept incrementally (a count of workers per value)."""

    def __init__(self, env: simpy.Environment, workers: int, staleness: int, call_s: float,
                 node: Optional["Node"] = None, cpu_s: float = 0.0, cpu_busy_s: float = 0.0,
                 caller_cpu_s: float = 0.0) -> None:
        """``cpu_s``, ``cpu_busy_s``: the clock process's CPU for a tick that finds it idle and
        for one that waits behind another; ``caller_cpu_s``: the ticking worker's own CPU for the
        call, on the cores (at most what of ``call_s`` the clock's CPU leaves); the rest of
        ``call_s`` is the call's way there and back. Unloaded, a tick takes ``call_s`` whatever
        the split; with ``cpu_s`` and ``caller_cpu_s`` 0 (or no ``node``) it is latency alone."""
        self.env, self.staleness, self.call_s = env, staleness, call_s
        self.node = node
        self.cpu_s, self.cpu_busy_s = min(cpu_s, call_s), min(cpu_busy_s, cpu_s, call_s)
        self.server = Mutex(env) if node is not None and self.cpu_s > 0 else None
        if self.server is None:
            self.cpu_s = self.cpu_busy_s = 0.0
        self.caller_cpu_s = min(caller_cpu_s, call_s - self.cpu_s) if node is not None else 0.0
        self.completed = [0] * workers
        self._at = {0: workers}            # completed steps -> workers there
        self.slowest = 0
        self._waiting: dict[int, simpy.Event] = {}  # slowest needed -> event

    def tick(self, worker: int, completed: int) -> Iterator[simpy.Event]:
        if self.caller_cpu_s > 0:
            yield self.node.cores.serve(self.caller_cpu_s)  # the worker's side: the call made, the answer read
        yield self.env.timeout(self.call_s - self.cpu_s - self.caller_cpu_s)  # the call's way there and back
        if self.server is not None:
            # The clock is one process: its ticks take a core each, one after another.
            queued = self.server.held
            yield from self.server.take()
            yield self.node.cores.serve(self.cpu_busy_s if queued else self.cpu_s)
            self.server.release()
        old = self.completed[worker]
        self.completed[worker] = completed
        self._at[old] -= 1
        self._at[completed] = self._at.get(completed, 0) + 1
        while self._at.get(self.slowest, 0) == 0:
            self.slowest += 1
            woken = self._waiting.pop(self.slowest, None)
            if woken is not None:
                woken.succeed()
        need = completed - self.staleness
        if self.slowest < need:
            waiting = self._waiting.get(need)
            if waiting is None:
                waiting = self._waiting[need] = self.env.event()
            yield waiting


class SimClient:
    """A worker's calls to every shard (``RayServerClient``): its own side of the transfer, and
    the S shards' services at once, waiting for all."""

    def __init__(self, env: simpy.Environment, spec: SimSpec, node: Node, shards: list[SimShard]) -> None:
        self.env, self.spec, self.node, self.shards = env, spec, node, shards

    def _store_reply(self) -> None:
        """The object store's work for a pull's slices (the shards' put of the reply, the
        worker's get), on the cores beside the worker's side of the reply, nobody waiting."""
        self.node.cores.serve_unwaited(self.spec.store_s)

    def _push_side(self) -> Iterator[simpy.Event]:
        """The worker's side of a push, and the object store's work for its slices (the worker's
        put, the shards' get) on the cores beside it from its start: the put is over, and the
        shards take the slices, when both are."""
        spec = self.spec
        put = self.node.cores.serve(spec.store_s) if spec.store_s > 0 else None  # no event without
        yield from self._side(spec.push_cpu_s, spec.push_wire_s)
        if put is not None:
            yield put

    def _side(self, cpu_s: float, wire_s: float) -> Iterator[simpy.Event]:
        if cpu_s > 0:
            yield self.node.cores.serve(cpu_s)  # serialising (or deserialising) the slices
        if wire_s > 0:
            yield self.env.timeout(wire_s)      # latency and bytes on the way

    def _all(self, calls: list) -> Iterator[simpy.Event]:
        """Run the calls at once and wait for all; the last runs in this process (one process
        fewer to start per call, which is most of the cost of a fork-join in SimPy)."""
        others = [self.env.process(c) for c in calls[:-1]]
        last = yield from calls[-1]
        if others:
            yield self.env.all_of(others)
        return [p.value for p in others] + [last]

    def _own_link(self, until: float) -> Iterator[simpy.Event]:
        """The worker's own link carried its S slices (M / B) alongside the shards' ends: the
        call is not over before ``until``."""
        if self.env.now < until:
            yield self.env.timeout(until - self.env.now)

    def _woken(self, start: float, alone_s: float) -> Iterator[simpy.Event]:
        """The caller's wake-up for a reply to a call held at the shards since ``start``, beyond
        that of a call held ``alone_s`` (``SimSpec.reply_wake``), while a core idles."""
        spec = self.spec
        if not spec.reply_wake:
            return
        extra = load_curve_at(spec.reply_wake, self.env.now - start) - load_curve_at(spec.reply_wake, alone_s)
        cores = self.node.cores
        if extra > 0 and cores.present - cores.unwaited < spec.cores:
            yield self.env.timeout(extra)

    def push(self, worker: int, step: int) -> Iterator[simpy.Event]:
        """A plain push (``RayServerClient.push``): its pull not due, a call of its own, over when
        its answer is back."""
        yield from self._push_side()
        start = self.env.now
        yield from self._all([s.push(worker, step) for s in self.shards])
        if self.spec.link_worker_s > 0:
            yield from self._own_link(start + self.spec.link_worker_s)
        yield from self._woken(start, self.spec.push_alone_s)
        yield from self._side(self.spec.push_return_cpu_s, self.spec.push_return_wire_s)

    def push_pull(self, worker: int, step: int) -> Iterator[simpy.Event]:
        """A push with the pull that is due (``RayServerClient.push_pull``): one call per shard.
        Returns when the last shard was done with the push (the worker's push/pull split)."""
        yield from self._push_side()
        start = self.env.now
        pushed = max((yield from self._all([s.push(worker, step, copy=True) for s in self.shards])))
        own = self.spec.link_worker_s
        if own > 0:
            # The gradient left over the worker's link, then the parameters came in over it.
            pushed = max(pushed, start + own)
            yield from self._own_link(pushed + own)
        yield from self._woken(start, self.spec.push_pull_alone_s)
        self._store_reply()
        yield from self._side(self.spec.pull_cpu_s, self.spec.pull_wire_s)
        return pushed

    def push_pull_at(self, worker: int, step: int, version: int) -> Iterator[simpy.Event]:
        """``sync``: a push, then the pull of ``version``, in one call per shard. Returns (when
        the last shard was done with the push, when the last shard let its call go: its push's
        end plus its wait for the round), as the worker splits the call."""
        def one(shard: SimShard) -> Iterator[simpy.Event]:
            pushed = yield from shard.push(worker, step)
            waited = yield from shard.pull_at(version)
            return pushed, waited
        yield from self._push_side()
        start = self.env.now
        results = yield from self._all([one(s) for s in self.shards])
        pushed, released = max(p for p, _ in results), max(p + w for p, w in results)
        own = self.spec.link_worker_s
        if own > 0:
            pushed = max(pushed, start + own)
            released = max(released, pushed)
            yield from self._own_link(released + own)
        yield from self._woken(start, self.spec.push_pull_alone_s)
        self._store_reply()
        yield from self._side(self.spec.pull_cpu_s, self.spec.pull_wire_s)
        return pushed, released

    def pull(self) -> Iterator[simpy.Event]:
        start = self.env.now
        yield from self._all([s.pull() for s in self.shards])
        if self.spec.link_worker_s > 0:
            yield from self._own_link(start + self.spec.link_worker_s)
        yield from self._woken(start, self.spec.pull_alone_s)
        self._store_reply()
        yield from self._side(self.spec.pull_cpu_s, self.spec.pull_wire_s)  # the parameters come back
