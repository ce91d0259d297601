"""The cost of one push through the testbed against a bare Ray actor call with the same payload.

For each gradient size, interleaved so both see the same machine state:

- *bare*: ``ray.get(actor.f.remote(array))`` on an actor whose method returns at once;
- *testbed*: ``RayServerClient.push`` to one ``ServerActor`` shard, which applies the
  gradient in place (``w -= lr * g``) and records its queue and apply events.

The ratio testbed/bare is the testbed's overhead per push, including the apply (real work
the bare call does not do; the apply's own time is reported beside it).

Run: ``python -m benchmarks.push_overhead`` (writes benchmarks/results/push_overhead.json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

SIZES = {"1KiB": 2**10, "1MiB": 2**20, "16MiB": 16 * 2**20}
RESULTS = Path(__file__).resolve().parent / "results" / "push_overhead.json"


class Bare:
    def f(self, x):
        return 0


def measure(repeats: int = 200) -> dict:
    import ray

    from actors.server import ServerActor
    from actors.worker import RayServerClient

    ray.init(address="local", num_cpus=2, object_store_memory=512 * 2**20, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR")
    try:
        bare = ray.remote(Bare).options(num_cpus=0).remote()
        results = {}
        for label, nbytes in SIZES.items():
            n = nbytes // 4
            server = ray.remote(ServerActor).options(num_cpus=0, max_concurrency=4).remote(
                shard=0, lo=0, hi=n, seed=0, learning_rate=0.01, run_id="bench", config_id=label, repeat=0)
            ray.get(server.ready.remote())
            client = RayServerClient([server])
            grad = np.ones(n, dtype=np.float32)
            reps = repeats if nbytes <= 2**20 else max(20, repeats // 5)
            bare_s, ours_s = [], []
            for _ in range(5):  # warm-up
                ray.get(bare.f.remote(grad))
                client.push([grad], 0, 0, [0])
            for i in range(reps):
                t0 = time.perf_counter()
                ray.get(bare.f.remote(grad))
                t1 = time.perf_counter()
                client.push([grad], 0, i, [0])
                t2 = time.perf_counter()
                bare_s.append(t1 - t0)
                ours_s.append(t2 - t1)
            export = ray.get(server.events.remote())
            ray.kill(server)
            phases = np.frombuffer(export["phase"], dtype=np.int8)
            from testbed.records import Phase
            apply_code = list(Phase).index(Phase.APPLY)
            apply_ns = np.asarray(export["duration_ns"])[phases == apply_code]
            b, o = statistics.median(bare_s), statistics.median(ours_s)
            results[label] = {"bytes": nbytes, "repeats": reps, "bare_median_s": b, "testbed_median_s": o,
                              "ratio_testbed_over_bare": o / b, "apply_median_s": float(np.median(apply_ns)) / 1e9}
        return results
    finally:
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    results = measure(args.repeats)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"benchmark": "push_overhead", "results": results}, indent=2) + "\n")
    print(f"{'size':>6} {'bare ms':>9} {'testbed ms':>11} {'ratio':>6} {'apply ms':>9}")
    for label, r in results.items():
        print(f"{label:>6} {r['bare_median_s'] * 1e3:9.3f} {r['testbed_median_s'] * 1e3:11.3f} "
              f"{r['ratio_testbed_over_bare']:6.2f} {r['apply_median_s'] * 1e3:9.3f}")
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
