"""Figure 7: the testbed against a plain asynchronous parameter server, side by side.

The peers are written the way Ray's documentation writes its asynchronous parameter server
(the "Parameter Server" example): one server actor whose ``apply_gradients(*grads)``
applies the gradients and returns the weights, worker actors whose
``compute_gradients(weights)`` computes and returns a gradient, and a driver that loops on
``ray.wait``, handing each finished gradient to the server and resubmitting the worker that
sent it with the new weights' object reference. Two workers:

- *docs*: as the documentation's: the gradient is computed once and the same array returned
  every step, so a step costs only the sleep and Ray's calls;
- *refill*: the gradient is produced every step (``GradientSource.fill``), as the testbed's
  workers do (one pass over M bytes).

Same gradient size, workers, compute (sleep) and total steps as the testbed's config. Ours:
``testbed.runner.run.run_config`` on the equivalent config (``async``, ``pull_every: 1``, one
shard, virtual workers as the testbed chooses). Steps per second are total steps over the
training span; the per-step overhead is a worker's time per step minus its compute. The
arms alternate, ``repeats`` times each, at two points: 8 workers x 16 MiB x 50 ms and
32 workers x 64 KiB x 20 ms. Targets: ours/docs steps per second >= 1.2 and >= 1.0.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from testbed.bench.common import Check, Figure, load_average, now_iso, ray_local

__all__ = ["run", "PeerServer", "PeerWorker", "DocsPeerWorker", "run_peer", "run_ours", "CASES"]

# name -> (workers, gradient bytes, compute seconds, target of ours/docs steps per second)
CASES = {"8x16MiB": (8, 16 * 2**20, 0.05, 1.2), "32x64KiB": (32, 64 * 2**10, 0.02, 1.0)}


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


class DocsPeerWorker:
    """The documentation's data worker as written there: its gradient is computed once (here:
    drawn once) and returned every step; only the sleep stands for the model's compute."""

    def __init__(self, index: int, elements: int, compute_s: float) -> None:
        from testbed.emulation.compute import GradientSource
        self.gradient = GradientSource(0, index, elements).fill(0).copy()
        self.compute_s = compute_s

    def compute_gradients(self, weights: np.ndarray) -> np.ndarray:
        time.sleep(self.compute_s)
        return self.gradient


def run_peer(ray: Any, workers: int, gradient_bytes: int, compute_s: float, steps_per_worker: int,
             worker_cls: type = PeerWorker) -> dict[str, float]:
    elements = gradient_bytes // 4
    ps = ray.remote(PeerServer).options(num_cpus=0).remote(elements)
    pool = [ray.remote(worker_cls).options(num_cpus=0).remote(i, elements, compute_s) for i in range(workers)]
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


def _case(ray: Any, workers: int, gradient_bytes: int, compute_s: float, steps: int, repeats: int) -> dict[str, Any]:
    arms: dict[str, list] = {"ours": [], "docs": [], "refill": []}
    names = list(arms)
    for rep in range(repeats):  # interleaved, each arm going first in turn
        k = rep % len(names)
        for name in names[k:] + names[:k]:
            if name == "ours":
                arms[name].append(run_ours(workers, gradient_bytes, compute_s, steps, rep))
            else:
                cls = DocsPeerWorker if name == "docs" else PeerWorker
                arms[name].append(run_peer(ray, workers, gradient_bytes, compute_s, steps, cls))
    med = lambda rows, key: statistics.median(r[key] for r in rows)  # noqa: E731
    out: dict[str, Any] = {"workers": workers, "gradient_bytes": gradient_bytes, "compute_s": compute_s,
                           "steps_per_worker": steps, "repeats": repeats, **arms}
    for name in names:
        out[f"{name}_steps_per_s"] = med(arms[name], "steps_per_s")
        out[f"{name}_overhead_per_step_s"] = med(arms[name], "overhead_per_step_s")
    for peer in ("docs", "refill"):
        out[f"ratio_steps_per_s_ours_over_{peer}"] = statistics.median(
            o["steps_per_s"] / p["steps_per_s"] for o, p in zip(arms["ours"], arms[peer]))
    return out


def run(quick: bool = False) -> Figure:
    load, date = load_average(), now_iso()
    steps = 10 if quick else 30
    repeats = 1 if quick else 3
    raw: dict[str, Any] = {}
    with ray_local(object_store_bytes=1024 * 2**20) as ray:
        for name, (workers, nbytes, compute_s, _) in CASES.items():
            raw[name] = _case(ray, workers, nbytes, compute_s, steps, repeats)
    checks = []
    for name, (_, _, _, target) in CASES.items():
        checks.append(Check(f"steps/s ours/docs {name}", raw[name]["ratio_steps_per_s_ours_over_docs"], target, ">="))
        checks.append(Check(f"steps/s ours/refill {name}", raw[name]["ratio_steps_per_s_ours_over_refill"], 1.0, ">="))
    return Figure("peer", "7. vs Ray's documented async parameter server (8 x 16 MiB x 50 ms; 32 x 64 KiB x 20 ms)",
                  tuple(checks), raw, load, date,
                  note="docs: the documentation's worker (gradient computed once); refill: the gradient produced "
                  "every step, as ours", quick=quick)
