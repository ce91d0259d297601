"""The worker process: a Ray actor that hosts one or more workers (virtual workers).

Each hosted ``Worker`` keeps everything a worker had as a process of its own: its index,
seeded gradient source and jitter, compute emulator, events (``worker-<i>``), faults and
its own calls to the shards, one push per step (pushes are never batched across
workers). With one worker the host runs it inline, as a worker process always did; with
several, each runs its step loop in a thread of the process. ``sleep`` compute then
overlaps (``time.sleep`` releases the interpreter lock), but ``spin`` and ``matmul``
compute of the workers of one process share that process's core: one process runs
Python on one core at a time. Threads rather than an asyncio loop: they keep the worker's
step loop the one that tests drive, and measured as cheap (docs/model.md, virtual workers).

A worker with a ``kill_worker`` fault takes its whole process down (``os._exit``), so
before exiting the host saves the events and position of every worker it hosts; the
restarted process resumes each of them at the step it was in (events of a step that was
in progress are dropped and the step is run again; a push of it that reached a shard is
acknowledged there without being applied twice). docs/reliability.md says what that does
to the other workers of the process.
"""

from __future__ import annotations

import concurrent.futures
import gc
import os
import threading
import time
from array import array
from typing import Any, Optional, Sequence

from actors.state import crash_path, load_state, save_state
from actors.worker import RayClockClient, RayServerClient, Worker
from testbed.config.faults import worker_faults
from testbed.config.spec import RunConfig
from testbed.records.events import EventRecorder, Role

__all__ = ["WorkerHost", "VirtualWorkers", "node_identity", "events_before", "host_name",
           "PREMAP_MIN_GRADIENT_BYTES"]

# From this gradient size on a worker maps the object store up front (actors/shm.py): the page
# faults it saves (~1 ms per 16 MiB written) outweigh the one-off cost (~0.2 s per GiB of store).
PREMAP_MIN_GRADIENT_BYTES = 2**20


def node_identity() -> dict[str, Any]:
    """The Ray node id, IP and process id of the calling actor."""
    import ray
    ctx = ray.get_runtime_context()
    return {"node": ctx.get_node_id(), "ip": ray.util.get_node_ip_address(), "pid": os.getpid()}


def host_name(process: int, indices: Sequence[int]) -> str:
    """What the run calls a worker process: ``worker-<i>`` when it hosts worker i alone (as
    before virtual workers), else ``worker-process-<p>``."""
    return f"worker-{indices[0]}" if len(indices) == 1 else f"worker-process-{process}"


def events_before(exported: dict[str, Any], steps_done: int) -> dict[str, Any]:
    """An export without the events of steps from ``steps_done`` on (a step in progress),
    so a worker that runs that step again records it once."""
    keep = [i for i, s in enumerate(exported["step"]) if s < steps_done]
    if len(keep) == len(exported["step"]):
        return exported
    out = {"constants": exported["constants"]}
    phase = array("b")
    phase.frombytes(exported["phase"])
    out["phase"] = array("b", (phase[i] for i in keep)).tobytes()
    for key in ("step", "start_ns", "duration_ns", "bytes", "staleness"):
        out[key] = array("q", (exported[key][i] for i in keep))
    return out


class VirtualWorkers:
    """Several plain ``Worker`` objects of one process, each run in its own thread (plain:
    tests drive it without Ray)."""

    def __init__(self, workers: Sequence[Worker]) -> None:
        self.workers = list(workers)
        self._pool = (concurrent.futures.ThreadPoolExecutor(len(self.workers), thread_name_prefix="worker")
                      if len(self.workers) > 1 else None)

    def start_threads(self) -> int:
        """Start the pool's threads now (one per worker; the pool starts them lazily, at the first
        calls), so that starting them is setup, not the init phase; returns how many run."""
        if self._pool is None:
            return 0
        together = threading.Barrier(len(self.workers))  # all at once: each call needs its own thread
        concurrent.futures.wait([self._pool.submit(together.wait, 30.0) for _ in self.workers])
        return len(self._pool._threads)

    def each(self, method: str) -> list:
        """Call ``method`` of every worker, each in its own thread when there are several (one
        runs inline); the first error is raised at once (the driver then stops the config)."""
        if self._pool is None:
            return [getattr(w, method)() for w in self.workers]
        futures = [self._pool.submit(getattr(w, method)) for w in self.workers]
        done, _ = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
        for f in done:
            if f.exception() is not None:
                raise f.exception()
        return [f.result() for f in futures]

    def crash_states(self, crashed_wall_ns: int) -> dict[int, dict[str, Any]]:
        """What each worker's restarted self needs, by worker index: its position (the step it
        was in) and its events without those of that step."""
        out = {}
        for w in self.workers:
            position = w.position()
            out[w.index] = {"events": events_before(w.recorder.export(), position["steps_done"]),
                            "position": position, "crashed_wall_ns": crashed_wall_ns}
        return out


class WorkerHost:
    """Workers ``indices`` of a config in one process; made remote by ``testbed.runner.run``."""

    def __init__(self, cfg: RunConfig, indices: Sequence[int], server_handles: list, run_id: str, repeat: int,
                 dataset: Optional[Any] = None, gate: Optional[Any] = None, clock_handle: Any = None,
                 state_dir: Optional[str] = None, multi_node: bool = False) -> None:
        """``state_dir``: where a crash leaves the workers' state (needed with a kill_worker fault);
        ``multi_node``: the run spans several nodes, so a shard on this process's node is near
        (its ``same_node`` link figures); on one node every shard is far (docs/network.md)."""
        if not indices:
            raise ValueError("a worker process hosts at least one worker")
        self.identity = node_identity()
        self.identity["workers"] = list(indices)
        self._handles, self._gate, self._clock = list(server_handles), gate, clock_handle
        self.state_dir = state_dir
        # Which shards share this node (their transfers take the same_node link); asked here, not
        # in ready(), so that a process Ray restarts after a fault knows it too.
        self._near = [False] * len(self._handles)
        if multi_node and cfg.network.shapes_anything:
            import ray
            shards = ray.get([h.ready.remote() for h in self._handles])
            self._near = [s["node"] == self.identity["node"] for s in shards]
        if cfg.gradient_bytes >= PREMAP_MIN_GRADIENT_BYTES:
            # Large gradients are written into (and pulled from) object-store memory every step;
            # map the store now, at setup, rather than a page fault per page during training.
            from actors.shm import premap_object_store
            self.identity["object_store_premap"] = premap_object_store()
        self.hosted = VirtualWorkers([self._worker(cfg, i, run_id, repeat, dataset) for i in indices])

    def _worker(self, cfg: RunConfig, index: int, run_id: str, repeat: int, dataset: Optional[Any]) -> Worker:
        recorder = EventRecorder(run_id=run_id, config_id=cfg.config_id, repeat=repeat,
                                 actor=f"worker-{index}", role=Role.WORKER, node=self.identity["node"])
        data_input = None
        if dataset is not None and dataset.files:
            from actors.reader import RayGateClient, WorkerInput
            gate = RayGateClient(self._gate) if self._gate is not None else None
            data_input = WorkerInput(cfg, index, dataset, gate)
        clock = RayClockClient(self._clock) if self._clock is not None else None
        worker = Worker(cfg, index, RayServerClient(self._handles, self._near), recorder, clock=clock,
                        data_input=data_input, faults=worker_faults(cfg, index),
                        crash=self._crash if self.state_dir else None)
        saved = load_state(crash_path(self.state_dir, f"worker-{index}")) if self.state_dir else None
        if saved is not None:  # this process is Ray's restart of one that crashed
            recorder.restore(saved["events"])
            worker.resume(saved["position"], saved["crashed_wall_ns"])
        return worker

    def _crash(self, step: int) -> None:
        """The kill_worker fault: save every hosted worker's events and position, then exit the
        process at once (all its workers go down with it)."""
        for index, state in self.hosted.crash_states(time.time_ns()).items():
            save_state(crash_path(self.state_dir, f"worker-{index}"), state)
        os._exit(1)

    def reconfigure(self, *args: Any, **kwargs: Any) -> None:
        """Host another config's workers in this same process: the constructor again, with the
        new config's arguments (``testbed.runner.run.ReusedActors``; one worker only, so no
        thread pool is left behind)."""
        if len(self.hosted.workers) > 1:
            raise RuntimeError("only a process hosting one worker is reconfigured")
        self.__dict__.clear()
        gc.collect()  # the last config's buffers go before the next one's are made
        self.__init__(*args, **kwargs)  # type: ignore[misc]

    def cpu_s(self) -> float:
        """CPU seconds this process has used (all its threads, so all its workers)."""
        return time.process_time()

    def ready(self) -> dict[str, Any]:
        """Answer once the process is up, after one call to every shard (and the gate, the step
        clock): a process's first call to an actor opens the connection (tens of ms here),
        which belongs in setup, not in the first step's push. The workers share it."""
        import ray
        calls = [h.ready.remote() for h in self._handles]
        calls += [self._gate.done.remote()] if self._gate is not None else []
        calls += [self._clock.ready.remote()] if self._clock is not None else []
        ray.get(calls)
        # The threads of the hosted workers, too: a process hosting k workers would otherwise
        # start k threads inside the init phase (~0.3 ms each here: the held-out draw 2026120112
        # measured init 2x the prediction for 15-24 sleep workers in 4 processes).
        self.hosted.start_threads()
        return self.identity

    def init(self) -> list[int]:
        """Every hosted worker's initialization read; bytes read by each."""
        return self.hosted.each("init")

    def train(self) -> list[int]:
        """Every hosted worker's step loop; the steps each has done, in ``indices`` order."""
        return self.hosted.each("train")

    def events(self) -> list[dict[str, Any]]:
        return [w.recorder.export() for w in self.hosted.workers]
