"""The parameter-server shard: a plain class, made a Ray actor where the run is launched.

A shard holds a contiguous slice of the float32 parameters and applies pushed
gradient slices one at a time, in place (``w -= lr * g``). The Ray actor is
threaded (several calls in flight) so that a push's arrival is seen when it
happens; a lock then serialises the applies, which is what makes the shard a
queue: the time a push waits for the lock is its ``queue`` phase.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from testbed.emulate import initial_parameters
from testbed.records import EventRecorder, Phase

__all__ = ["ParameterServer", "ServerActor"]

# Elements per apply chunk: 256 KiB of float32, so a chunk of g, w and the scratch fit in L2.
_APPLY_CHUNK = 1 << 16


class ParameterServer:
    """One shard of the parameters: elements [lo, hi) of the model."""

    def __init__(self, *, shard: int, lo: int, hi: int, seed: int, learning_rate: float,
                 recorder: EventRecorder) -> None:
        if hi <= lo:
            raise ValueError(f"shard {shard} is empty: [{lo}, {hi})")
        self.shard = shard
        self.lo, self.hi = lo, hi
        self.learning_rate = np.float32(learning_rate)
        self.recorder = recorder
        self.w = initial_parameters(seed, lo, hi)
        # Scratch for lr * g, reused: no allocation per update. Large slices are applied in
        # cache-sized chunks so g, w and the scratch stay in cache between the two passes.
        self._scaled = np.empty(min(self.w.size, _APPLY_CHUNK), dtype=np.float32)
        self._lock = threading.Lock()
        self.version = 0                 # number of updates applied so far
        self.pushes: dict[int, int] = {}  # worker -> pushes received

    def push(self, grad: np.ndarray, worker: int, step: int, pulled_version: int = -1) -> int:
        """Apply one gradient slice; returns the shard's version after it.

        ``grad`` may be a read-only array (Ray hands over zero-copy views): it is only read.
        ``pulled_version`` is the shard version the worker last pulled; the apply records
        its staleness (updates applied in between), or -1 when unknown.
        """
        if grad.shape != self.w.shape:
            raise ValueError(f"shard {self.shard} expects {self.w.shape[0]} values, got {grad.shape}")
        wall_arrive, t_arrive = self.recorder.now()
        with self._lock:
            t_start = self.recorder.mono_ns()
            self._apply(grad)
            staleness = self.version - pulled_version if pulled_version >= 0 else -1
            self.version += 1
            self.pushes[worker] = self.pushes.get(worker, 0) + 1
            t_end = self.recorder.mono_ns()
            # Recorded under the lock: the recorder's columns must not interleave between threads.
            self.recorder.record(Phase.QUEUE, step, wall_arrive, t_start - t_arrive)
            self.recorder.record(Phase.APPLY, step, wall_arrive + (t_start - t_arrive), t_end - t_start,
                                 grad.nbytes, staleness)
            return self.version

    def _apply(self, grad: np.ndarray) -> None:
        """``w -= lr * g`` in place, without allocating and without copying ``grad``."""
        w, scratch, lr = self.w, self._scaled, self.learning_rate
        for lo in range(0, w.size, _APPLY_CHUNK):
            hi = min(lo + _APPLY_CHUNK, w.size)
            part = scratch[: hi - lo]
            np.multiply(grad[lo:hi], lr, out=part)
            np.subtract(w[lo:hi], part, out=w[lo:hi])

    def pull(self) -> tuple[int, np.ndarray]:
        """The shard's version and a consistent copy of its parameters."""
        with self._lock:
            return self.version, self.w.copy()

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"shard": self.shard, "lo": self.lo, "hi": self.hi, "updates": self.version,
                    "pushes": dict(self.pushes)}

    def parameters(self) -> np.ndarray:
        with self._lock:
            return self.w.copy()


class ServerActor:
    """Thin Ray wrapper around ``ParameterServer``; made remote (threaded) by ``testbed.run``."""

    def __init__(self, *, shard: int, lo: int, hi: int, seed: int, learning_rate: float,
                 run_id: str, config_id: str, repeat: int) -> None:
        import os

        import ray
        ctx = ray.get_runtime_context()
        self.identity = {"node": ctx.get_node_id(), "ip": ray.util.get_node_ip_address(), "pid": os.getpid()}
        recorder = EventRecorder(run_id=run_id, config_id=config_id, repeat=repeat, actor=f"server-{shard}",
                                 role="server", node=self.identity["node"])
        self.server = ParameterServer(shard=shard, lo=lo, hi=hi, seed=seed, learning_rate=learning_rate,
                                      recorder=recorder)

    def ready(self) -> dict[str, Any]:
        return self.identity

    def push(self, grad: np.ndarray, worker: int, step: int, pulled_version: int = -1) -> int:
        return self.server.push(grad, worker, step, pulled_version)

    def _apply(self, grad: np.ndarray) -> None:
        """``w -= lr * g`` in place, without allocating and without copying ``grad``."""
        w, scratch, lr = self.w, self._scaled, self.learning_rate
        for lo in range(0, w.size, _APPLY_CHUNK):
            hi = min(lo + _APPLY_CHUNK, w.size)
            part = scratch[: hi - lo]
            np.multiply(grad[lo:hi], lr, out=part)
            np.subtract(w[lo:hi], part, out=w[lo:hi])

    def pull(self) -> tuple[int, np.ndarray]:
        return self.server.pull()

    def stats(self) -> dict[str, Any]:
        return self.server.stats()

    def parameters(self) -> np.ndarray:
        return self.server.parameters()

    def events(self) -> dict[str, Any]:
        # Taken under the lock so no apply is half-recorded.
        with self.server._lock:
            return self.server.recorder.export()
