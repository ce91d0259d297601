"""The worker: a plain class that runs the step loop.

Per step: optional input read, compute, push the gradient to every shard (the S
slices concurrently; the push ends when every shard has applied its slice), then,
by consistency mode (docs/consistency.md):

- ``async``: every ``pull_every`` steps a pull from every shard; no worker waits for another.
  A pull that is due travels with the push (``push_pull``: one call per shard, which
  applies and answers with its parameters); the shard's timestamp of the end of its
  part of the push splits the call into ``push`` and ``pull``.
- ``sync``: a push and a pull of version N x (k + 1) in one call per shard after every step
  k (``push_pull_at``); each shard holds the call after its apply until all N pushes of the
  step are applied. The call is recorded as ``push`` (until the last shard was done with the
  push), ``barrier`` (from there until the last shard let the call go) and ``pull`` (the
  rest: the snapshot copy, the reply, the transfer).
- ``ssp``: after every step but the last, a tick of the step clock, which holds the worker
  while it is more than ``staleness`` steps ahead of the slowest (timed as ``barrier``,
  including the clock call); then pulls as in ``async``, as a call of its own (after the tick).

Faults (``testbed.config.faults``): a straggler's compute is stretched by its factor; a worker
with a ``kill_worker`` fault calls its ``crash`` hook before the step, which in the actor
(``actors.host``) saves the events and positions of every worker of the process and exits
it. Ray restarts the actor and retries the driver's ``train`` call; the new process puts
the saved events back, resumes each worker at the step it was in, and records the time in
between as ``restart``.

Shaped links (docs/network.md): a worker has its own link (bandwidth only; the shard charges
the latency). It issues the S calls of a push, then waits its gradient's bytes to shards on
other nodes on its outbound link while the calls are in flight (the S slices share it, so one
wait for all of them), then waits for the calls; a pull likewise on its inbound link; a call
that pushes and pulls waits both. The shards wait their side (``actors.server``), so a
transfer takes the longer of the two ends.

The worker talks to the servers through a ``ServerClient`` and to the step clock through
a ``ClockClient``; tests pass ones that call plain objects, runs pass the Ray ones.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Protocol, Sequence

import numpy as np

from testbed.config.faults import WorkerFaults
from testbed.config.spec import RunConfig, SyncMode
from testbed.emulation.compute import ComputeEmulator, ComputePlan, GradientSource
from testbed.emulation.network import Endpoint
from testbed.records.events import EventRecorder, Phase
from testbed.records.runqueue import waited_ns

__all__ = ["ServerClient", "ClockClient", "LocalServerClient", "RayServerClient", "RayClockClient", "Worker"]


# Called while a client's calls are in flight (the worker's own link), or None.
During = Optional[Callable[[], Any]]


class ServerClient(Protocol):
    """Calls to the S shards; ``near[i]``: shard i is on the worker's node (its ``same_node`` link)."""
    near: list[bool]

    def push(self, slices: Sequence[np.ndarray], worker: int, step: int, versions: Sequence[int],
             during: During = None) -> list[int]: ...
    def pull(self, step: int = -1, during: During = None) -> list[tuple[int, np.ndarray]]: ...
    def pull_at(self, version: int) -> list[tuple[int, np.ndarray, int]]: ...
    def push_pull(self, slices: Sequence[np.ndarray], worker: int, step: int,
                  versions: Sequence[int], during: During = None) -> list[tuple[int, np.ndarray, int]]: ...
    def push_pull_at(self, slices: Sequence[np.ndarray], worker: int, step: int, versions: Sequence[int],
                     version: int, during: During = None) -> list[tuple[int, np.ndarray, int, int]]: ...


class ClockClient(Protocol):
    def tick(self, worker: int, completed: int) -> bool: ...


class LocalServerClient:
    """Calls plain ``ParameterServer`` objects directly (tests, no Ray)."""

    def __init__(self, servers: Sequence[Any]) -> None:
        self.servers = list(servers)
        self.near = [False] * len(self.servers)

    # Plain calls run one after another, so ``during`` runs before them (not beside them).
    def push(self, slices, worker, step, versions, during=None):
        _ = during and during()
        return [s.push(g, worker, step, v, n) for s, g, v, n in zip(self.servers, slices, versions, self.near)]

    def pull(self, step=-1, during=None):
        _ = during and during()
        return [s.pull(step, n) for s, n in zip(self.servers, self.near)]

    def pull_at(self, version):
        return [s.pull_at(version, n) for s, n in zip(self.servers, self.near)]

    def push_pull(self, slices, worker, step, versions, during=None):
        _ = during and during()
        return [s.push_pull(g, worker, step, v, n) for s, g, v, n in zip(self.servers, slices, versions, self.near)]

    def push_pull_at(self, slices, worker, step, versions, version, during=None):
        _ = during and during()
        return [s.push_pull_at(g, worker, step, v, version, n)
                for s, g, v, n in zip(self.servers, slices, versions, self.near)]


class RayServerClient:
    """Pushes to and pulls from shard actors; all shards are called before waiting on any."""

    def __init__(self, handles: Sequence[Any], near: Optional[Sequence[bool]] = None) -> None:
        self.handles = list(handles)
        self.near = list(near) if near is not None else [False] * len(self.handles)

    @staticmethod
    def _wait(refs: list, during: During) -> list:
        import ray
        if during is not None:  # the worker's own link, while the calls are in flight
            during()
        return ray.get(refs)

    def _near(self) -> list[tuple]:
        """The extra argument of each shard's call: ``(near,)`` when some shard is near (a
        multi-node run with shaped links), else nothing (one argument less to serialise)."""
        return [(n,) for n in self.near] if any(self.near) else [()] * len(self.handles)

    def push(self, slices, worker, step, versions, during=None):
        return self._wait([h.push.remote(g, worker, step, v, *n)
                           for h, g, v, n in zip(self.handles, slices, versions, self._near())], during)

    def pull(self, step=-1, during=None):
        return self._wait([h.pull.remote(step, *n) for h, n in zip(self.handles, self._near())], during)

    def pull_at(self, version):
        return self._wait([h.pull_at.remote(version, *n) for h, n in zip(self.handles, self._near())], None)

    def push_pull(self, slices, worker, step, versions, during=None):
        return self._wait([h.push_pull.remote(g, worker, step, v, *n)
                           for h, g, v, n in zip(self.handles, slices, versions, self._near())], during)

    def push_pull_at(self, slices, worker, step, versions, version, during=None):
        return self._wait([h.push_pull_at.remote(g, worker, step, v, version, *n)
                           for h, g, v, n in zip(self.handles, slices, versions, self._near())], during)


class RayClockClient:
    """Ticks the step clock actor (``ssp``)."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def tick(self, worker, completed):
        import ray
        return ray.get(self.handle.tick.remote(worker, completed))


class Worker:
    """Worker ``index`` of a config: owns its gradient source, its compute emulator and its events."""

    def __init__(self, cfg: RunConfig, index: int, client: ServerClient, recorder: EventRecorder, *,
                 clock: Optional[ClockClient] = None, sleep: Callable[[float], None] = time.sleep,
                 data_input: Optional[Any] = None, faults: WorkerFaults = WorkerFaults(),
                 crash: Optional[Callable[[int], None]] = None) -> None:
        """``crash(step)`` is called before a step the faults kill the worker at (the actor's
        exits the process); ``faults.slowdown`` stretches the compute of a straggler."""
        if (cfg.sync is SyncMode.SSP) != (clock is not None):
            raise ValueError(f"sync {cfg.sync.value!r}: a step clock is needed for 'ssp' and only for it")
        self.cfg = cfg
        self.index = index
        self.client = client
        self.clock = clock
        self.recorder = recorder
        self.source = GradientSource(cfg.seed, index, cfg.gradient_elements)
        self.rng = np.random.default_rng([cfg.seed, 3, index])
        plan = ComputePlan(cfg.compute, self.rng, slowdown=faults.slowdown if faults.straggles else None)
        self.compute = ComputeEmulator(cfg.compute, plan, sleep=sleep)
        self.faults = faults
        self.crash = crash
        self.crashed_steps: set[int] = set()  # kills already done (a restarted worker does not die again)
        self.restarted_wall_ns: Optional[int] = None  # when the crash this process recovers from happened
        self.bounds = cfg.shard_bounds()
        self.versions = [0] * len(self.bounds)  # shard versions as of the last pull
        self.params: list[np.ndarray] = []
        self.steps_done = 0
        self._step_start: tuple[int, Any] = (-1, None)  # (step, jitter state when it began)
        self.input = data_input  # an actors.reader.WorkerInput, or None when there is no data set
        # Its own link (bandwidth only: the shard charges the latency); None when unshaped.
        self.link = Endpoint.for_worker(f"worker-{index}", cfg.network) if cfg.network.bandwidth else None

    def _far_bytes(self, slices: Sequence[np.ndarray]) -> int:
        """Bytes of ``slices`` going to shards on other nodes (those cross the worker's link)."""
        return sum(g.nbytes for g, near in zip(slices, self.client.near) if not near)

    def _during(self, slices: Sequence[np.ndarray], send: bool, receive: bool) -> During:
        """What the worker waits on its own link while a call is in flight (None when unshaped)."""
        if self.link is None:
            return None
        nbytes = self._far_bytes(slices)
        if nbytes == 0:
            return None
        link = self.link

        def wait() -> None:
            if send:
                link.send(nbytes)
            if receive:
                link.receive(nbytes)
        return wait

    def init(self) -> int:
        """The initialization phase: read the initial data (timed by the reader); returns bytes read."""
        if self.input is None:
            return 0
        return self.input.read_init(self.recorder)

    def train(self, steps: Optional[int] = None) -> int:
        """Run the step loop from where it stands up to ``steps`` (default: the config's); returns steps done."""
        steps = self.cfg.steps if steps is None else steps
        rec = self.recorder
        nbytes = self.cfg.gradient_bytes
        pull_every = self.cfg.pull_every
        step_input = self.input if self.input is not None and self.input.step_reader is not None else None
        mode = self.cfg.sync
        if self.restarted_wall_ns is not None:  # the lost time: from the crash until now
            wall, _ = rec.now()
            rec.record(Phase.RESTART, self.steps_done, self.restarted_wall_ns, max(0, wall - self.restarted_wall_ns))
            self.restarted_wall_ns = None
        for step in range(self.steps_done, steps):
            if self.crash is not None:  # where a restart of this process would take the worker up
                self._step_start = (step, self.rng.bit_generator.state)
            if step in self.faults.kill_steps and step not in self.crashed_steps and self.crash is not None:
                self.crashed_steps.add(step)
                self.crash(step)
            if step_input is not None:
                waited = waited_ns()  # of the read, the wait for a core (outside its timing: ~10 us each)
                read_wall = rec.now()[0] if waited is not None else 0
                with rec.timed(Phase.READ, step, step_input.step_bytes):
                    step_input.read_step()
                if waited is not None:
                    rec.record(Phase.READ_RUNQ, step, read_wall, max(0, (waited_ns() or waited) - waited))
            with rec.timed(Phase.COMPUTE, step):
                self.compute.run(step)
            grad = self.source.fill(step)
            slices = [grad[lo:hi] for lo, hi in self.bounds]
            due = (step + 1) % pull_every == 0
            if mode is SyncMode.SYNC:
                self._sync_push_pull(step, slices)
            elif mode is SyncMode.ASYNC and due:
                self._push_pull(step, slices)
            else:
                with rec.timed(Phase.PUSH, step, nbytes):
                    self.client.push(slices, self.index, step, self.versions, self._during(slices, True, False))
                if mode is SyncMode.SSP and step + 1 < self.cfg.steps:
                    with rec.timed(Phase.BARRIER, step):
                        self.clock.tick(self.index, step + 1)
                if due:
                    with rec.timed(Phase.PULL, step, nbytes):
                        pulled = self.client.pull(step, self._during(slices, False, True))
                    self.versions = [v for v, _ in pulled]
                    self.params = [p for _, p in pulled]
            self.steps_done = step + 1
        return self.steps_done

    def position(self) -> dict[str, Any]:
        """Where the worker stands, for its restarted self: steps done, pulled versions, kills
        done and the jitter generator's state as of the start of the step in progress (a
        process that hosts several workers is killed while the others are mid-step)."""
        at_step, rng_state = self._step_start
        if at_step != self.steps_done:  # between steps: nothing drawn since the last one ended
            rng_state = self.rng.bit_generator.state
        return {"steps_done": self.steps_done, "versions": list(self.versions),
                "crashed_steps": sorted(self.crashed_steps), "rng": rng_state}

    def resume(self, position: dict[str, Any], crashed_wall_ns: int) -> None:
        self.steps_done = position["steps_done"]
        self.versions = list(position["versions"])
        self.crashed_steps = set(position["crashed_steps"])
        self.rng.bit_generator.state = position["rng"]
        self.restarted_wall_ns = crashed_wall_ns

    def _split(self, wall0: int, total_ns: int, pushed_wall_ns: Sequence[int]) -> int:
        """The ``push`` part of a call that pushed and pulled: from its start until the last
        shard was done with the push (the shards' wall clocks; within the call's span)."""
        return min(total_ns, max(0, max(pushed_wall_ns) - wall0))

    def _push_pull(self, step: int, slices: list[np.ndarray]) -> None:
        """Push and pull in one call per shard, recorded as ``push`` then ``pull``."""
        rec, nbytes = self.recorder, self.cfg.gradient_bytes
        wall0, t0 = rec.now()
        pulled = self.client.push_pull(slices, self.index, step, self.versions, self._during(slices, True, True))
        total_ns = rec.mono_ns() - t0
        push_ns = self._split(wall0, total_ns, [w for _, _, w in pulled])
        rec.record(Phase.PUSH, step, wall0, push_ns, nbytes)
        rec.record(Phase.PULL, step, wall0 + push_ns, total_ns - push_ns, nbytes)
        self.versions = [v for v, _, _ in pulled]
        self.params = [p for _, p, _ in pulled]

    def _sync_push_pull(self, step: int, slices: list[np.ndarray]) -> None:
        """Push, then pull the parameters as of all N pushes of ``step``, in one call per shard;
        recorded as ``push``, ``barrier`` (until the last shard let the call go) and ``pull``."""
        rec, nbytes = self.recorder, self.cfg.gradient_bytes
        wall0, t0 = rec.now()
        pulled = self.client.push_pull_at(slices, self.index, step, self.versions, self.cfg.workers * (step + 1),
                                          self._during(slices, True, True))
        total_ns = rec.mono_ns() - t0
        push_ns = self._split(wall0, total_ns, [w for _, _, _, w in pulled])
        # From the end of the push (the last shard done with it) until the last shard let the
        # call go (its push stamp plus its wait): the shards' waits overlap the push and each
        # other, so the longest wait alone would count time already in the push, taken from
        # the pull.
        released_ns = max(pushed + waited for _, _, waited, pushed in pulled) - wall0
        barrier_ns = min(total_ns - push_ns, max(0, released_ns - push_ns))
        rec.record(Phase.PUSH, step, wall0, push_ns, nbytes)
        rec.record(Phase.BARRIER, step, wall0 + push_ns, barrier_ns)
        rec.record(Phase.PULL, step, wall0 + push_ns + barrier_ns, total_ns - push_ns - barrier_ns, nbytes)
        self.versions = [v for v, _, _, _ in pulled]
        self.params = [p for _, p, _, _ in pulled]
