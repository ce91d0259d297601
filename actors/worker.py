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
  push), ``barrier`` (the longest a shard held it) and ``pull`` (the rest: the snapshot copy,
  the reply, the transfer).
- ``ssp``: after every step but the last, a tick of the step clock, which holds the worker
  while it is more than ``staleness`` steps ahead of the slowest (timed as ``barrier``,
  including the clock call); then pulls as in ``async``, as a call of its own (after the tick).

Faults (``testbed.config.faults``): a straggler's compute is stretched by its factor; a worker
with a ``kill_worker`` fault calls its ``crash`` hook before the step, which in the actor
(``actors.host``) saves the events and positions of every worker of the process and exits
it. Ray restarts the actor and retries the driver's ``train`` call; the new process puts
the saved events back, resumes each worker at the step it was in, and records the time in
between as ``restart``.

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
from testbed.records.events import EventRecorder, Phase

__all__ = ["ServerClient", "ClockClient", "LocalServerClient", "RayServerClient", "RayClockClient", "Worker"]


class ServerClient(Protocol):
    def push(self, slices: Sequence[np.ndarray], worker: int, step: int, versions: Sequence[int]) -> list[int]: ...
    def pull(self) -> list[tuple[int, np.ndarray]]: ...
    def pull_at(self, version: int) -> list[tuple[int, np.ndarray, int]]: ...
    def push_pull(self, slices: Sequence[np.ndarray], worker: int, step: int,
                  versions: Sequence[int]) -> list[tuple[int, np.ndarray, int]]: ...
    def push_pull_at(self, slices: Sequence[np.ndarray], worker: int, step: int, versions: Sequence[int],
                     version: int) -> list[tuple[int, np.ndarray, int, int]]: ...


class ClockClient(Protocol):
    def tick(self, worker: int, completed: int) -> bool: ...


class LocalServerClient:
    """Calls plain ``ParameterServer`` objects directly (tests, no Ray)."""

    def __init__(self, servers: Sequence[Any]) -> None:
        self.servers = list(servers)

    def push(self, slices, worker, step, versions):
        return [s.push(g, worker, step, v) for s, g, v in zip(self.servers, slices, versions)]

    def pull(self):
        return [s.pull() for s in self.servers]

    def pull_at(self, version):
        return [s.pull_at(version) for s in self.servers]

    def push_pull(self, slices, worker, step, versions):
        return [s.push_pull(g, worker, step, v) for s, g, v in zip(self.servers, slices, versions)]

    def push_pull_at(self, slices, worker, step, versions, version):
        return [s.push_pull_at(g, worker, step, v, version) for s, g, v in zip(self.servers, slices, versions)]


class RayServerClient:
    """Pushes to and pulls from shard actors; all shards are called before waiting on any."""

    def __init__(self, handles: Sequence[Any]) -> None:
        self.handles = list(handles)

    def push(self, slices, worker, step, versions):
        import ray
        return ray.get([h.push.remote(g, worker, step, v) for h, g, v in zip(self.handles, slices, versions)])

    def pull(self):
        import ray
        return ray.get([h.pull.remote() for h in self.handles])

    def pull_at(self, version):
        import ray
        return ray.get([h.pull_at.remote(version) for h in self.handles])

    def push_pull(self, slices, worker, step, versions):
        import ray
        return ray.get([h.push_pull.remote(g, worker, step, v) for h, g, v in zip(self.handles, slices, versions)])

    def push_pull_at(self, slices, worker, step, versions, version):
        import ray
        return ray.get([h.push_pull_at.remote(g, worker, step, v, version)
                        for h, g, v in zip(self.handles, slices, versions)])


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
                with rec.timed(Phase.READ, step, step_input.step_bytes):
                    step_input.read_step()
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
                    self.client.push(slices, self.index, step, self.versions)
                if mode is SyncMode.SSP and step + 1 < self.cfg.steps:
                    with rec.timed(Phase.BARRIER, step):
                        self.clock.tick(self.index, step + 1)
                if due:
                    with rec.timed(Phase.PULL, step, nbytes):
                        pulled = self.client.pull()
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
        pulled = self.client.push_pull(slices, self.index, step, self.versions)
        total_ns = rec.mono_ns() - t0
        push_ns = self._split(wall0, total_ns, [w for _, _, w in pulled])
        rec.record(Phase.PUSH, step, wall0, push_ns, nbytes)
        rec.record(Phase.PULL, step, wall0 + push_ns, total_ns - push_ns, nbytes)
        self.versions = [v for v, _, _ in pulled]
        self.params = [p for _, p, _ in pulled]

    def _sync_push_pull(self, step: int, slices: list[np.ndarray]) -> None:
        """Push, then pull the parameters as of all N pushes of ``step``, in one call per shard;
        recorded as ``push``, ``barrier`` (the longest a shard held the call) and ``pull``."""
        rec, nbytes = self.recorder, self.cfg.gradient_bytes
        wall0, t0 = rec.now()
        pulled = self.client.push_pull_at(slices, self.index, step, self.versions, self.cfg.workers * (step + 1))
        total_ns = rec.mono_ns() - t0
        push_ns = self._split(wall0, total_ns, [w for _, _, _, w in pulled])
        barrier_ns = min(total_ns - push_ns, max(waited for _, _, waited, _ in pulled))
        rec.record(Phase.PUSH, step, wall0, push_ns, nbytes)
        rec.record(Phase.BARRIER, step, wall0 + push_ns, barrier_ns)
        rec.record(Phase.PULL, step, wall0 + push_ns + barrier_ns, total_ns - push_ns - barrier_ns, nbytes)
        self.versions = [v for v, _, _, _ in pulled]
        self.params = [p for _, p, _, _ in pulled]
