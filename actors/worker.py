"""The worker: a plain class that runs the step loop, and its Ray wrapper.

Per step: optional input read, compute, push the gradient to every shard (the S
slices concurrently; the push ends when every shard has applied its slice), then,
by consistency mode (docs/consistency.md):

- ``async``: every ``pull_every`` steps a pull from every shard; no worker waits for another.
- ``sync``: a pull of version N x (k + 1) from every shard after every step k; each shard
  holds the pull until all N pushes of the step are applied. The time a shard held it is
  the step's ``barrier`` (measured by the shard, the longest over the shards); the rest of
  the call (request, snapshot copy, reply, transfer) is the step's ``pull``.
- ``ssp``: after every step but the last, a tick of the step clock, which holds the worker
  while it is more than ``staleness`` steps ahead of the slowest (timed as ``barrier``,
  including the clock call); then pulls as in ``async``.

Faults (``testbed.config.faults``): a straggler's compute is stretched by its factor; a worker
with a ``kill_worker`` fault calls its ``crash`` hook before the step, which in the actor
saves its events and position (``actors.state``) and exits the process. Ray restarts the
actor and retries the driver's ``train`` call; the new process puts the saved events back,
resumes at the step it died before, and records the time in between as ``restart``.

The worker talks to the servers through a ``ServerClient`` and to the step clock through
a ``ClockClient``; tests pass ones that call plain objects, runs pass the Ray ones.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Optional, Protocol, Sequence

import numpy as np

from actors.state import crash_path, load_state, save_state
from testbed.config.faults import WorkerFaults, worker_faults
from testbed.config.spec import RunConfig, SyncMode
from testbed.emulation.compute import ComputeEmulator, ComputePlan, GradientSource
from testbed.records.events import EventRecorder, Phase, Role

__all__ = ["ServerClient", "ClockClient", "LocalServerClient", "RayServerClient", "RayClockClient", "Worker",
           "WorkerActor", "node_identity"]


class ServerClient(Protocol):
    def push(self, slices: Sequence[np.ndarray], worker: int, step: int, versions: Sequence[int]) -> list[int]: ...
    def pull(self) -> list[tuple[int, np.ndarray]]: ...
    def pull_at(self, version: int) -> list[tuple[int, np.ndarray, int]]: ...


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
            with rec.timed(Phase.PUSH, step, nbytes):
                self.client.push(slices, self.index, step, self.versions)
            if mode is SyncMode.SYNC:
                self._sync_pull(step)
            else:
                if mode is SyncMode.SSP and step + 1 < self.cfg.steps:
                    with rec.timed(Phase.BARRIER, step):
                        self.clock.tick(self.index, step + 1)
                if (step + 1) % pull_every == 0:
                    with rec.timed(Phase.PULL, step, nbytes):
                        pulled = self.client.pull()
                    self.versions = [v for v, _ in pulled]
                    self.params = [p for _, p in pulled]
            self.steps_done = step + 1
        return self.steps_done

    def position(self) -> dict[str, Any]:
        """Where the worker stands, for its restarted self: steps done, pulled versions, kills
        done and the jitter generator's state."""
        return {"steps_done": self.steps_done, "versions": list(self.versions),
                "crashed_steps": sorted(self.crashed_steps), "rng": self.rng.bit_generator.state}

    def resume(self, position: dict[str, Any], crashed_wall_ns: int) -> None:
        self.steps_done = position["steps_done"]
        self.versions = list(position["versions"])
        self.crashed_steps = set(position["crashed_steps"])
        self.rng.bit_generator.state = position["rng"]
        self.restarted_wall_ns = crashed_wall_ns

    def _sync_pull(self, step: int) -> None:
        """Pull the parameters as of all N pushes of ``step``, split into ``barrier`` and ``pull``."""
        wall0, t0 = self.recorder.now()
        pulled = self.client.pull_at(self.cfg.workers * (step + 1))
        total_ns = self.recorder.mono_ns() - t0
        barrier_ns = min(total_ns, max(waited for _, _, waited in pulled))
        self.recorder.record(Phase.BARRIER, step, wall0, barrier_ns)
        self.recorder.record(Phase.PULL, step, wall0 + barrier_ns, total_ns - barrier_ns, self.cfg.gradient_bytes)
        self.versions = [v for v, _, _ in pulled]
        self.params = [p for _, p, _ in pulled]


# From this gradient size on a worker maps the object store up front (actors/shm.py): the page
# faults it saves (~1 ms per 16 MiB written) outweigh the one-off cost (~0.2 s per GiB of store).
PREMAP_MIN_GRADIENT_BYTES = 2**20


def node_identity() -> dict[str, Any]:
    """The Ray node id, IP and process id of the calling actor."""
    import ray
    ctx = ray.get_runtime_context()
    return {"node": ctx.get_node_id(), "ip": ray.util.get_node_ip_address(), "pid": os.getpid()}


class WorkerActor:
    """Thin Ray wrapper around ``Worker``; made remote by ``testbed.runner.run``."""

    def __init__(self, cfg: RunConfig, index: int, server_handles: list, run_id: str, repeat: int,
                 dataset: Optional[Any] = None, gate: Optional[Any] = None, clock_handle: Any = None,
                 state_dir: Optional[str] = None) -> None:
        """``state_dir``: where a crash leaves the worker's state (needed with a kill_worker fault)."""
        self.identity = node_identity()
        self._gate, self._clock = gate, clock_handle
        if cfg.gradient_bytes >= PREMAP_MIN_GRADIENT_BYTES:
            # Large gradients are written into (and pulled from) object-store memory every step;
            # map the store now, at setup, rather than a page fault per page during training.
            from actors.shm import premap_object_store
            self.identity["object_store_premap"] = premap_object_store()
        self.recorder = EventRecorder(run_id=run_id, config_id=cfg.config_id, repeat=repeat,
                                      actor=f"worker-{index}", role=Role.WORKER, node=self.identity["node"])
        data_input = None
        if dataset is not None and dataset.files:
            from actors.reader import RayGateClient, WorkerInput
            data_input = WorkerInput(cfg, index, dataset, RayGateClient(gate) if gate is not None else None)
        clock = RayClockClient(clock_handle) if clock_handle is not None else None
        faults = worker_faults(cfg, index)
        self.crash_file = crash_path(state_dir, f"worker-{index}") if state_dir else None
        self.worker = Worker(cfg, index, RayServerClient(server_handles), self.recorder, clock=clock,
                             data_input=data_input, faults=faults,
                             crash=self._crash if self.crash_file is not None else None)
        saved = load_state(self.crash_file) if self.crash_file is not None else None
        if saved is not None:  # this process is Ray's restart of one that crashed
            self.recorder.restore(saved["events"])
            self.worker.resume(saved["position"], saved["crashed_wall_ns"])

    def _crash(self, step: int) -> None:
        """The kill_worker fault: save the events and the position, then exit the process at once."""
        save_state(self.crash_file, {"events": self.recorder.export(), "position": self.worker.position(),
                                     "crashed_wall_ns": time.time_ns()})
        os._exit(1)

    def cpu_s(self) -> float:
        """CPU seconds this actor's process has used (all its threads)."""
        import time
        return time.process_time()

    def ready(self) -> dict[str, Any]:
        """Answer once the worker is up, after one call to every shard (and the gate, the step
        clock): a process's first call to an actor opens the connection (tens of ms here),
        which belongs in setup, not in the first step's push."""
        import ray
        calls = [h.ready.remote() for h in self.worker.client.handles]
        calls += [self._gate.done.remote()] if self._gate is not None else []
        calls += [self._clock.ready.remote()] if self._clock is not None else []
        ray.get(calls)
        return self.identity

    def init(self) -> int:
        return self.worker.init()

    def train(self) -> int:
        return self.worker.train()

    def events(self) -> dict[str, Any]:
        return self.recorder.export()
