"""Figure 1: the shard's apply bandwidth against numpy's in-place update bandwidth.

For 16 MiB and 64 MiB gradients, interleaved (one push, then one baseline update, ...):

- *apply*: a pusher actor pushes its gradient to a real ``ServerActor`` shard through the
  testbed's ``RayServerClient``; the shard's own ``apply`` events give the time of
  ``w -= lr * g`` on the read-only array Ray hands over (fresh object-store memory on
  every push, as in a run);
- *baseline*: in another actor (the same kind of process), the same update on private,
  already-touched arrays of the same size, two ways: numpy's plain
  ``np.subtract(w, lr * g, out=w)`` and the shard's own chunked kernel
  (``testbed.emulation.apply``). The faster of the
  two is the machine's in-place update bandwidth (the memory limit) for that size.

Bandwidth is gradient bytes per second; the check is apply bandwidth / baseline bandwidth
(medians), target >= 0.8.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from testbed.bench.common import Check, Figure, load_average, now_iso, ray_local
from testbed.emulation.apply import apply_in_place, apply_scratch

__all__ = ["run", "Pusher", "Baseline", "TARGET"]

TARGET = 0.8
SIZES = {"16MiB": 16 * 2**20, "64MiB": 64 * 2**20}


class Pusher:
    """Plays a worker: holds one gradient and pushes it to a shard on request."""

    def __init__(self, nbytes: int) -> None:
        self.grad = np.ones(nbytes // 4, dtype=np.float32)

    def push(self, server: Any, step: int) -> float:
        from actors.worker import RayServerClient
        t0 = time.perf_counter()
        RayServerClient([server]).push([self.grad], 0, step, [-1])
        return time.perf_counter() - t0


class Baseline:
    """The same update on private, warm arrays: what the memory allows."""

    def __init__(self, nbytes: int) -> None:
        self.w = np.ones(nbytes // 4, dtype=np.float32)
        self.g = np.ones(nbytes // 4, dtype=np.float32)
        self.lr = np.float32(0.01)
        self.scratch = apply_scratch(self.w.size)

    def update_s(self) -> dict[str, float]:
        t0 = time.perf_counter()
        np.subtract(self.w, self.lr * self.g, out=self.w)
        t1 = time.perf_counter()
        apply_in_place(self.w, self.g, self.lr, self.scratch)  # the shard's own kernel
        t2 = time.perf_counter()
        return {"plain_s": t1 - t0, "chunked_s": t2 - t1}


def measure_size(ray: Any, nbytes: int, repeats: int) -> dict[str, Any]:
    from actors.server import ServerActor
    from testbed.records.events import Phase, export_durations_ns

    n = nbytes // 4
    server = ray.remote(ServerActor).options(num_cpus=0, max_concurrency=4).remote(
        shard=0, lo=0, hi=n, seed=0, learning_rate=0.01, run_id="bench", config_id="apply", repeat=0)
    pusher = ray.remote(Pusher).options(num_cpus=0).remote(nbytes)
    base = ray.remote(Baseline).options(num_cpus=0).remote(nbytes)
    try:
        ray.get([server.ready.remote(), pusher.push.remote(server, -1), base.update_s.remote()])
        warm = 3
        for i in range(warm):
            ray.get(pusher.push.remote(server, i))
            ray.get(base.update_s.remote())
        push_s, plain_s, chunked_s = [], [], []
        for i in range(repeats):
            push_s.append(ray.get(pusher.push.remote(server, warm + i)))
            b = ray.get(base.update_s.remote())
            plain_s.append(b["plain_s"])
            chunked_s.append(b["chunked_s"])
        export = ray.get(server.events.remote())
    finally:
        for a in (server, pusher, base):
            ray.kill(a)
    apply_s = np.asarray(export_durations_ns(export, Phase.APPLY), dtype=float) / 1e9
    apply_s = apply_s[-repeats:].tolist()
    med = {"apply": statistics.median(apply_s), "plain": statistics.median(plain_s),
           "chunked": statistics.median(chunked_s)}
    baseline_s = min(med["plain"], med["chunked"])
    return {"bytes": nbytes, "repeats": repeats,
            "apply_s": apply_s, "baseline_plain_s": plain_s, "baseline_chunked_s": chunked_s, "push_s": push_s,
            "apply_median_bytes_per_s": nbytes / med["apply"],
            "baseline_plain_median_bytes_per_s": nbytes / med["plain"],
            "baseline_chunked_median_bytes_per_s": nbytes / med["chunked"],
            "ratio_apply_over_baseline": baseline_s / med["apply"],
            "push_median_s": statistics.median(push_s)}


def run(quick: bool = False) -> Figure:
    load, date = load_average(), now_iso()
    repeats = 8 if quick else 30
    raw: dict[str, Any] = {}
    with ray_local(object_store_bytes=768 * 2**20) as ray:
        for label, nbytes in SIZES.items():
            raw[label] = measure_size(ray, nbytes, repeats)
    checks = tuple(Check(f"apply/baseline {label}", r["ratio_apply_over_baseline"], TARGET, ">=")
                   for label, r in raw.items())
    return Figure("apply_bandwidth", "1. server apply bandwidth vs numpy in-place update", checks, raw,
                  load, date, note="baseline: the faster of numpy's plain in-place update and the shard's chunked "
                  "kernel on private warm arrays, in an actor; apply: the shard's apply events", quick=quick)
