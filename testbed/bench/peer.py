"""Figure 7: the testbed against a plain asynchronous parameter server, side by side.

The peer is written the way Ray's documentation writes its asynchronous parameter server
(the "Parameter Server" example): one server actor whose ``apply_gradients(*grads)``
applies the gradients and returns the weights, worker actors whose
``compute_gradients(weights)`` computes and returns a gradient, and a driver that loops on
``ray.wait``, handing each finished gradient to the server and the new weights to the
worker that sent it. Same gradient size, workers, compute (sleep) and gradient production
(``GradientSource.fill``) as the testbed's config; same total number of steps.

Ours: ``testbed.runner.run.run_config`` on the equivalent config (``async``, ``pull_every: 1``,
one shard). Steps per second are total steps over the training span; the per-step overhead
is a worker's time per step minus its compute. The two alternate, ``repeats`` times each.
Target: ours/peer steps per second >= 1.0 at 8 workers with 16 MiB gradients.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from testbed.bench.common import Check, Figure, load_average, now_iso, ray_local

__all__ = ["run", "PeerServer", "PeerWorker", "run_peer", "run_ours", "TARGET"]

TARGET = 1.0
WORKERS = 8
GRADIENT_BYTES = 16 * 2**20
COMPUTE_S = 0.05


class PeerServer:
    """The documentation's parameter server: sums the gradients it is given, applies them,
    returns the weights."""

    def __init__(self, elements: int, lr: float = 0.01) -> None:
        self.weights = np.zeros(elements, dtype=np.float32)
        self.lr = np.float32(lr)

    def apply_gradients(self, *gradients: np.ndarray) -> np.ndarray:
        summed = np.stack(gradients).sum(axis=0)
        self.weights -= self.lr * summed
        return self.weights

    def get_weights(self) -> np.ndarray:
        return self.weights


class PeerWorker:
    """The documentation's data worker: takes the weights, computes, returns a gradient."""

    def __init__(self, index: int, elements: int, compute_s: float) -> None:
        from testbed.emulation.compute import GradientSource
        self.source = GradientSource(0, index, elements)
        self.compute_s = compute_s
        self.step = 0

    def compute_gradients(self, weights: np.ndarray) -> np.ndarray:
        time.sleep(self.compute_s)
        self.step += 1
        return self.source.fill(self.step)


def run_peer(ray: Any, workers: int, gradient_bytes: int, compute_s: float, steps_per_worker: int) -> dict[str, float]:
    elements = gradient_bytes // 4
    ps = ray.remote(PeerServer).options(num_cpus=0).remote(elements)
    pool = [ray.remote(PeerWorker).options(num_cpus=0).remote(i, elements, compute_s) for i in range(workers)]
    try:
        ray.get([ps.get_weights.remote()] + [w.__ray_ready__.remote() for w in pool])
        total = workers * steps_per_worker
        t0 = time.perf_counter()
        current = ps.get_weights.remote()
        gradients = {w.compute_gradients.remote(current): w for w in pool}
        dispatched = workers
        for _ in range(total):
            ready, _ = ray.wait(list(gradients))
            worker = gradients.pop(ready[0])
            current = ps.apply_gradients.remote(*ready)
            if dispatched < total:
                gradients[worker.compute_gradients.remote(current)] = worker
                dispatched += 1
        ray.get(current)
        elapsed = time.perf_counter() - t0
    finally:
        for a in [ps, *pool]:
            ray.kill(a)
    step_s = elapsed * workers / total
    return {"train_s": elapsed, "steps": total, "steps_per_s": total / elapsed, "step_s": step_s,
            "overhead_per_step_s": step_s - compute_s}


def run_ours(workers: int, gradient_bytes: int, compute_s: float, steps_per_worker: int, repeat: int) -> dict[str, float]:
    from testbed.config.spec import ExperimentSpec, expand
    from testbed.runner.run import run_config
    spec = ExperimentSpec(name="bench-peer", workers=workers, gradient_bytes=gradient_bytes, pull_every=1,
                          compute={"mode": "sleep", "seconds": compute_s}, workload={"steps": steps_per_worker})
    cfg, = expand(spec)
    outcome = run_config(cfg, repeat, "bench-peer")
    cols = outcome.columns
    train = [d for p, a, d in zip(cols["phase"], cols["actor"], cols["duration_ns"]) if p == "train" and a == "driver"]
    train_s = train[0] / 1e9
    total = sum(outcome.worker_steps)
    step_s = train_s / steps_per_worker
    phase_means = {}
    for phase in ("compute", "push", "pull", "queue", "apply"):
        xs = [d for p, d in zip(cols["phase"], cols["duration_ns"]) if p == phase]
        phase_means[f"{phase}_mean_s"] = statistics.mean(xs) / 1e9 if xs else float("nan")
    return {"train_s": train_s, "steps": total, "steps_per_s": total / train_s, "step_s": step_s,
            "overhead_per_step_s": step_s - compute_s, **phase_means}


def run(quick: bool = False) -> Figure:
    load, date = load_average(), now_iso()
    steps = 10 if quick else 30
    repeats = 1 if quick else 3
    ours, peer = [], []
    with ray_local(object_store_bytes=1024 * 2**20) as ray:
        for rep in range(repeats):  # alternate, each side going first in turn
            sides = [("ours", ours), ("peer", peer)]
            for name, out in (sides if rep % 2 == 0 else sides[::-1]):
                if name == "ours":
                    out.append(run_ours(WORKERS, GRADIENT_BYTES, COMPUTE_S, steps, rep))
                else:
                    out.append(run_peer(ray, WORKERS, GRADIENT_BYTES, COMPUTE_S, steps))
    med = lambda rows, key: statistics.median(r[key] for r in rows)  # noqa: E731
    ratio = statistics.median(o["steps_per_s"] / p["steps_per_s"] for o, p in zip(ours, peer))
    raw = {"workers": WORKERS, "gradient_bytes": GRADIENT_BYTES, "compute_s": COMPUTE_S, "steps_per_worker": steps,
           "repeats": repeats, "ours": ours, "peer": peer, "ratio_steps_per_s_ours_over_peer": ratio,
           "ours_overhead_per_step_s": med(ours, "overhead_per_step_s"),
           "peer_overhead_per_step_s": med(peer, "overhead_per_step_s"),
           "ours_steps_per_s": med(ours, "steps_per_s"), "peer_steps_per_s": med(peer, "steps_per_s")}
    checks = (Check("steps/s ours/peer", ratio, TARGET, ">="),
              Check("overhead/step ours", raw["ours_overhead_per_step_s"] * 1e3,
                    raw["peer_overhead_per_step_s"] * 1e3, "<=", "ms"))
    return Figure("peer", "7. vs Ray's documented async parameter server (8 workers, 16 MiB)", checks, raw,
                  load, date, note="second check's target is the peer's own overhead per step", quick=quick)
