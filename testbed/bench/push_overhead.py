"""Figure 3: one push through the testbed against a bare Ray actor call with the same payload.

A caller actor (playing a worker) times, interleaved so all arms see the same machine state:

- *bare*: ``ray.get(echo.f.remote(array))`` on an actor whose method returns at once;
- *bare threaded*: the same on an echo actor made threaded as a shard is
  (``max_concurrency``): what Ray's threaded actors cost by themselves;
- *testbed*: ``RayServerClient.push`` to one ``ServerActor`` shard, which applies the
  gradient in place (``w -= lr * g``) and records its queue and apply events.

The ratio testbed/bare is the testbed's cost per push. For 16 MiB it includes the apply,
real work a bare call does not do, so the ratio is also given with the apply's median
subtracted (the call's own overhead). Targets: 1 KiB <= 1.05, 16 MiB <= 1.1.

Run alone: ``python -m benchmarks --only push_overhead``.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from testbed.bench.common import Check, Figure, load_average, now_iso, ray_local

__all__ = ["run", "Echo", "Caller", "TARGETS"]

SIZES = {"1KiB": 2**10, "1MiB": 2**20, "16MiB": 16 * 2**20}
TARGETS = {"1KiB": 1.05, "16MiB": 1.1}
CONCURRENCY = 12  # a shard of an 8-worker run: N + 4 threads


class Echo:
    def f(self, x: Any = None) -> int:
        return 0


class Caller:
    """Times the arms one call after another, rotating which goes first."""

    def compare(self, bare: Any, bare_threaded: Any, server: Any, nbytes: int, repeats: int) -> dict[str, list]:
        import ray

        from actors.worker import RayServerClient
        grad = np.ones(nbytes // 4, dtype=np.float32)
        client = RayServerClient([server])
        arms = {"bare": lambda i: ray.get(bare.f.remote(grad)),
                "bare_threaded": lambda i: ray.get(bare_threaded.f.remote(grad)),
                "testbed": lambda i: client.push([grad], 0, i, [-1])}
        names = list(arms)
        for i in range(5):  # warm-up
            for fn in arms.values():
                fn(i)
        out: dict[str, list] = {a: [] for a in names}
        for i in range(repeats):
            k = i % len(names)
            for name in names[k:] + names[:k]:
                t0 = time.perf_counter()
                arms[name](i)
                out[name].append(time.perf_counter() - t0)
        return out


def measure(ray: Any, repeats: int) -> dict[str, Any]:
    from actors.server import ServerActor
    from testbed.records.events import Phase, export_durations_ns

    results = {}
    caller = ray.remote(Caller).options(num_cpus=0).remote()
    bare = ray.remote(Echo).options(num_cpus=0).remote()
    threaded = ray.remote(Echo).options(num_cpus=0, max_concurrency=CONCURRENCY).remote()
    try:
        for label, nbytes in SIZES.items():
            server = ray.remote(ServerActor).options(num_cpus=0, max_concurrency=CONCURRENCY).remote(
                shard=0, lo=0, hi=nbytes // 4, seed=0, learning_rate=0.01, run_id="bench", config_id=label, repeat=0)
            ray.get(server.ready.remote())
            reps = repeats if nbytes <= 2**20 else max(15, repeats // 5)
            times = ray.get(caller.compare.remote(bare, threaded, server, nbytes, reps))
            export = ray.get(server.events.remote())
            ray.kill(server)
            apply_s = np.asarray(export_durations_ns(export, Phase.APPLY), dtype=float) / 1e9
            med = {arm: statistics.median(v) for arm, v in times.items()}
            apply_med = float(np.median(apply_s[-reps:]))
            results[label] = {
                "bytes": nbytes, "repeats": reps, **{f"{a}_median_s": m for a, m in med.items()},
                "apply_median_s": apply_med,
                "ratio_testbed_over_bare": med["testbed"] / med["bare"],
                "ratio_testbed_minus_apply_over_bare": (med["testbed"] - apply_med) / med["bare"],
                "ratio_bare_threaded_over_bare": med["bare_threaded"] / med["bare"],
                "samples_s": times}
    finally:
        for a in (caller, bare, threaded):
            ray.kill(a)
    return results


def run(quick: bool = False) -> Figure:
    load, date = load_average(), now_iso()
    with ray_local() as ray:
        raw = measure(ray, 60 if quick else 300)
    checks = (Check("push/bare 1KiB", raw["1KiB"]["ratio_testbed_over_bare"], TARGETS["1KiB"], "<="),
              Check("push/bare 16MiB", raw["16MiB"]["ratio_testbed_over_bare"], TARGETS["16MiB"], "<="),
              Check("(push-apply)/bare 16MiB", raw["16MiB"]["ratio_testbed_minus_apply_over_bare"],
                    TARGETS["16MiB"], "<="))
    return Figure("push_overhead", "3. push through the testbed vs a bare actor call", checks, raw, load, date,
                  note="16 MiB: the push includes the shard's in-place apply (real work the bare call does not "
                  "do); the third check subtracts its median", quick=quick)
