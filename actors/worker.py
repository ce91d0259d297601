"""The worker: a plain class that runs the step loop, and its Ray wrapper.

Per step: optional input read, compute, push the gradient to every shard (the S
slices concurrently; the push ends when every shard has applied its slice), and
every ``pull_every`` steps a pull of the parameters from every shard. Asynchronous
SGD: no worker waits for another.

The worker talks to the servers through a ``ServerClient``; tests pass one that
calls plain ``ParameterServer`` objects, runs pass ``RayServerClient``.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Optional, Protocol, Sequence

import numpy as np

from testbed.emulate import ComputeEmulator, ComputePlan, GradientSource
from testbed.records import EventRecorder, Phase, Role
from testbed.spec import RunConfig

__all__ = ["ServerClient", "LocalServerClient", "RayServerClient", "Worker", "WorkerActor"]


class ServerClient(Protocol):
    def push(self, slices: Sequence[np.ndarray], worker: int, step: int, versions: Sequence[int]) -> list[int]: ...
    def pull(self) -> list[tuple[int, np.ndarray]]: ...


class LocalServerClient:
    """Calls plain ``ParameterServer`` objects directly (tests, no Ray)."""

    def __init__(self, servers: Sequence[Any]) -> None:
        self.servers = list(servers)

    def push(self, slices, worker, step, versions):
        return [s.push(g, worker, step, v) for s, g, v in zip(self.servers, slices, versions)]

    def pull(self):
        return [s.pull() for s in self.servers]


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


class Worker:
    """Worker ``index`` of a config: owns its gradient source, its compute emulator and its events."""

    def __init__(self, cfg: RunConfig, index: int, client: ServerClient, recorder: EventRecorder, *,
                 sleep: Callable[[float], None] = time.sleep, data_input: Optional[Any] = None) -> None:
        self.cfg = cfg
        self.index = index
        self.client = client
        self.recorder = recorder
        self.source = GradientSource(cfg.seed, index, cfg.gradient_elements)
        rng = np.random.default_rng([cfg.seed, 3, index])
        self.compute = ComputeEmulator(cfg.compute, ComputePlan(cfg.compute, rng), sleep=sleep)
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
        for step in range(self.steps_done, steps):
            if step_input is not None:
                with rec.timed(Phase.READ, step, step_input.step_bytes):
                    step_input.read_step()
            with rec.timed(Phase.COMPUTE, step):
                self.compute.run(step)
            grad = self.source.fill(step)
            slices = [grad[lo:hi] for lo, hi in self.bounds]
            with rec.timed(Phase.PUSH, step, nbytes):
                self.client.push(slices, self.index, step, self.versions)
            if (step + 1) % pull_every == 0:
                with rec.timed(Phase.PULL, step, nbytes):
                    pulled = self.client.pull()
                self.versions = [v for v, _ in pulled]
                self.params = [p for _, p in pulled]
            self.steps_done = step + 1
        return self.steps_done


def node_identity() -> dict[str, Any]:
    """The Ray node id, IP and process id of the calling actor."""
    import ray
    ctx = ray.get_runtime_context()
    return {"node": ctx.get_node_id(), "ip": ray.util.get_node_ip_address(), "pid": os.getpid()}


class WorkerActor:
    """Thin Ray wrapper around ``Worker``; made remote by ``testbed.run``."""

    def __init__(self, cfg: RunConfig, index: int, server_handles: list, run_id: str, repeat: int,
                 dataset: Optional[Any] = None, gate: Optional[Any] = None) -> None:
        self.identity = node_identity()
        self.recorder = EventRecorder(run_id=run_id, config_id=cfg.config_id, repeat=repeat,
                                      actor=f"worker-{index}", role=Role.WORKER, node=self.identity["node"])
        data_input = None
        if dataset is not None and dataset.files:
            from actors.reader import RayGateClient, WorkerInput
            data_input = WorkerInput(cfg, index, dataset, RayGateClient(gate) if gate is not None else None)
        self.worker = Worker(cfg, index, RayServerClient(server_handles), self.recorder, data_input=data_input)

    def ready(self) -> dict[str, Any]:
        return self.identity

    def init(self) -> int:
        return self.worker.init()

    def train(self) -> int:
        return self.worker.train()

    def events(self) -> dict[str, Any]:
        return self.recorder.export()
