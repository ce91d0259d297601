"""Calibration probes: small actors that measure what the model's profile needs, from
inside Ray, on the same paths the workers and shards use.

``Probe`` plays a worker's side (it calls other actors and times the calls, and
reports its own CPU time); ``Echo`` is the far end of a bare call.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

__all__ = ["Probe", "Echo", "StartupProbe", "matmul_flops_per_s"]


class StartupProbe:
    """An actor that starts like a worker or a shard does (same imports), for timing setup."""

    def __init__(self) -> None:
        import actors.host  # noqa: F401 - imported for its start-up cost
        import actors.server  # noqa: F401
        import actors.worker  # noqa: F401
        self._hosted: Any = None

    def cpu_s(self) -> float:
        return time.process_time()

    def host_workers(self, n: int) -> int:
        """Host ``n`` workers that do nothing, as a worker process hosts its workers
        (``actors.host.VirtualWorkers``: inline at one, a thread each, started now, at more);
        returns the threads running."""
        from actors.host import VirtualWorkers
        self._hosted = VirtualWorkers([_Idle() for _ in range(n)])
        return self._hosted.start_threads()

    def init_hosted(self) -> int:
        """The init phase's call as a worker process answers it with nothing to read: every
        hosted worker's ``init`` through the host's hand-out (``host_workers`` first)."""
        return len(self._hosted.each("init"))

    def gate_pass(self, gate: Any, index: int) -> int:
        """A sequential init's turn with nothing to read: take the I/O gate's token as worker
        ``index`` and hand it on, through the same client the workers use."""
        from actors.reader import GATE_TIMEOUT_S, RayGateClient
        client = RayGateClient(gate)
        client.acquire(index, GATE_TIMEOUT_S)
        client.release(index)
        return index


class _Idle:
    """A hosted worker with nothing to read: its ``init`` returns at once."""

    def init(self) -> int:
        return 0


class Echo:
    """Returns at once: the far end of a bare actor call. Maps the object store up front, as
    shards and large-gradient workers do (actors/shm.py), so transfers calibrate the same path."""

    def __init__(self) -> None:
        from actors.shm import premap_object_store
        premap_object_store()

    def f(self, x: Any = None) -> int:
        return 0

    def held(self, hold_s: float) -> int:
        """Returns after busy-waiting ``hold_s``: a call its callee holds that long (a shard
        applying, or a sync pull waiting for its round), without a sleep's own late wake-up."""
        if hold_s > 0:
            from testbed.emulation.compute import spin
            spin(hold_s)
        return 0

    def get_s(self, refs: list[Any]) -> float:
        """Seconds to fetch ``refs[0]`` from the object store into this process (a shard
        getting a pushed slice; the list keeps Ray from resolving the reference first)."""
        import ray
        t0 = time.perf_counter()
        value = ray.get(refs[0])
        elapsed = time.perf_counter() - t0
        del value
        return elapsed

    def cpu_s(self) -> float:
        return time.process_time()


def matmul_flops_per_s(n: int = 384, repeats: int = 10) -> float:
    """float32 matmul rate of this process (median of ``repeats``), as the matmul compute mode runs it."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), dtype=np.float32)
    np.matmul(a, b, out=c)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.matmul(a, b, out=c)
        times.append(time.perf_counter() - t0)
    return 2.0 * n**3 / float(np.median(times))


class Probe:
    """Times calls from one actor to another (as a worker calls a shard)."""

    def __init__(self) -> None:
        from actors.shm import premap_object_store
        premap_object_store()

    def latency_s(self, target: Any, repeats: int, pause_s: float = 0.0) -> list[float]:
        import ray
        out = []
        for _ in range(repeats):
            if pause_s:
                time.sleep(pause_s)
            t0 = time.perf_counter()
            ray.get(target.f.remote())
            out.append(time.perf_counter() - t0)
        return out

    def held_calls_s(self, target: Any, holds_s: list[float], repeats: int, pause_s: float) -> dict[float, list[float]]:
        """For each hold, ``repeats`` calls to ``target.held`` after ``pause_s`` idle each: the
        seconds each took beyond its hold. The holds in turn, forwards then backwards, so that a
        slow spell of the machine falls on several of them."""
        import ray
        out: dict[float, list[float]] = {float(h): [] for h in holds_s}
        order = [float(h) for h in holds_s]
        for n in range(repeats):
            for hold in order if n % 2 == 0 else order[::-1]:
                time.sleep(pause_s)
                t0 = time.perf_counter()
                ray.get(target.held.remote(hold))
                out[hold].append(time.perf_counter() - t0 - hold)
        return out

    def queued_calls(self, target: Any, rounds: int, in_flight: int) -> int:
        """``rounds`` times, ``in_flight`` bare calls at once (they queue at ``target``); the calls made."""
        import ray
        for _ in range(rounds):
            ray.get([target.f.remote() for _ in range(in_flight)])
        return rounds * in_flight

    def transfer_s(self, target: Any, nbytes: int, repeats: int, pause_s: float = 0.0) -> list[float]:
        import ray
        payload = np.ones(nbytes // 4, dtype=np.float32)
        ray.get(target.f.remote(payload))
        out = []
        for _ in range(repeats):
            if pause_s:
                time.sleep(pause_s)
            t0 = time.perf_counter()
            ray.get(target.f.remote(payload))
            out.append(time.perf_counter() - t0)
        return out

    def transfer_sweep_s(self, target: Any, sizes: list[int], repeats: int,
                         pause_s: float = 0.0) -> dict[int, list[float]]:
        """Like ``transfer_s`` for several sizes, interleaved round-robin so that a burst of
        load elsewhere on the machine falls on every size alike."""
        import ray
        payloads = {n: np.ones(n // 4, dtype=np.float32) for n in sizes}
        for p in payloads.values():
            ray.get(target.f.remote(p))
        out: dict[int, list[float]] = {n: [] for n in sizes}
        for _ in range(repeats):
            for n, p in payloads.items():
                if pause_s:
                    time.sleep(pause_s)
                t0 = time.perf_counter()
                ray.get(target.f.remote(p))
                out[n].append(time.perf_counter() - t0)
        return out

    def push_pull_loop(self, server: Any, nbytes: int, steps: int, pause_s: float = 0.0) -> dict[str, float]:
        """A worker's step loop: a pause (sleep-mode compute), a push, a pull, ``steps`` times.

        Returns this process's CPU seconds per step (a worker's own cost of a step: sleeping
        costs none) and the wall seconds per step spent in the push and the pull.
        """
        import ray
        grad = np.ones(nbytes // 4, dtype=np.float32)
        ray.get(server.push.remote(grad, 0, 0, -1))
        ray.get(server.pull.remote())
        cpu0, busy = time.process_time(), 0.0
        for step in range(steps):
            if pause_s:
                time.sleep(pause_s)
            t0 = time.perf_counter()
            ray.get(server.push.remote(grad, 0, step, -1))
            ray.get(server.pull.remote())
            busy += time.perf_counter() - t0
        return {"cpu_per_step_s": (time.process_time() - cpu0) / steps, "wall_per_step_s": busy / steps}

    def store_sweep_s(self, target: Any, sizes: list[int], repeats: int) -> dict[int, list[tuple[float, float]]]:
        """(put, get) seconds per size: this process puts an array in the object store (as a
        worker's large argument is put) and ``target`` fetches it (``Echo.get_s``)."""
        import ray
        payloads = {n: np.ones(n // 4, dtype=np.float32) for n in sizes}
        out: dict[int, list[tuple[float, float]]] = {n: [] for n in sizes}
        for _ in range(repeats):
            for n, p in payloads.items():
                t0 = time.perf_counter()
                ref = ray.put(p)
                put_s = time.perf_counter() - t0
                out[n].append((put_s, ray.get(target.get_s.remote([ref]))))
                del ref
        return out

    def copy_s(self, sizes: list[int], repeats: int = 5) -> dict[int, float]:
        """Median seconds of copying an array of each size (a shard's pull copies its slice)."""
        out = {}
        for n in sizes:
            a = np.ones(n // 4, dtype=np.float32)
            a.copy()
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                a.copy()
                times.append(time.perf_counter() - t0)
            out[n] = float(np.median(times))
        return out

    def fill_bytes_per_s(self, nbytes: int) -> float:
        """How fast a worker produces a gradient (``GradientSource.fill``: one multiply pass)."""
        from testbed.emulation.compute import GradientSource
        source = GradientSource(0, 0, nbytes // 4)
        source.fill(0)
        times = []
        for step in range(10):
            t0 = time.perf_counter()
            source.fill(step)
            times.append(time.perf_counter() - t0)
        return nbytes / float(np.median(times))

    def matmul_flops_per_s(self, n: int) -> float:
        return matmul_flops_per_s(n)

    def cpu_s(self) -> float:
        return time.process_time()
