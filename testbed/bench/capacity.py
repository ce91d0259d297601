"""Figure 8: emulation capacity, how many sleep-mode workers one machine emulates at (nearly)
the ideal step rate.

Real configs through ``testbed.runner.run.run_config`` on a fresh local Ray: 4 KiB gradients,
100 ms of sleep compute, one shard, ``async`` with a pull every step, 20 steps per worker,
at N = 1 and then growing N (virtual workers: the testbed's own choice of processes per
node, unless ``workers_per_process`` is given). The ideal step rate at N is N x the rate of
one worker alone (measured first, in the same session); the ratio of the measured rate to
it falls as the cores fill with the workers' and the shard's per-step work. The figure is
the largest N at >= 0.9 and at >= 0.8 of the ideal, with the CPU per step of the worker
processes and of the shard, and what Ray's own processes took meanwhile.
Targets: 64 workers at >= 0.9, 128 at >= 0.8.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from testbed.bench.common import Check, Figure, load_average, now_iso, ray_local

__all__ = ["run", "measure_capacity", "largest_at", "TARGETS", "WORKER_COUNTS"]

TARGETS = {0.9: 64, 0.8: 128}
WORKER_COUNTS = (16, 32, 64, 96, 128, 192, 256)
GRADIENT_BYTES = 4096
COMPUTE_S = 0.1


def largest_at(ratios: dict[int, float], threshold: float) -> int:
    """The largest N whose ratio to the ideal rate is >= ``threshold`` (0 when none is)."""
    return max((n for n, r in ratios.items() if r == r and r >= threshold), default=0)


def _one(workers: int, steps: int, per_process: Optional[int], repeat: int) -> dict[str, Any]:
    from testbed.config.spec import ExperimentSpec, expand
    from testbed.runner.run import run_config
    spec = ExperimentSpec(name="bench-capacity", workers=workers, gradient_bytes=GRADIENT_BYTES,
                          workers_per_process=per_process, compute={"mode": "sleep", "seconds": COMPUTE_S},
                          workload={"steps": steps})
    cfg, = expand(spec)
    out = run_config(cfg, repeat, "bench-capacity")
    cols = out.columns
    span = {p: d / 1e9 for p, a, d in zip(cols["phase"], cols["actor"], cols["duration_ns"]) if a == "driver"}
    pushes = sum(out.worker_steps)
    cpu = out.train_cpu_s
    worker_cpu = sum(v for k, v in cpu.items() if k.startswith("worker-"))
    server_cpu = sum(v for k, v in cpu.items() if k.startswith("server-"))
    return {"workers": workers, "processes": len(out.worker_processes), "steps": pushes,
            "train_s": span["train"], "setup_s": span["setup"], "steps_per_s": pushes / span["train"],
            "worker_cpu_per_step_s": worker_cpu / pushes, "server_cpu_per_step_s": server_cpu / pushes,
            "ray_background_cpu_s": sum(out.ray_background_cpu_s.values()),
            "ray_background_by_process_s": out.ray_background_cpu_s, "load_average": load_average()}


def measure_capacity(counts: Sequence[int], steps: int, per_process: Optional[int] = None,
                     stop_below: float = 0.7) -> dict[str, Any]:
    """One worker alone, then each N in ``counts`` until the ratio falls below ``stop_below``."""
    one = _one(1, steps, None, 0)
    rows = {}
    for n in counts:
        row = _one(n, steps, per_process, 0)
        row["ideal_steps_per_s"] = n * one["steps_per_s"]
        row["ratio_to_ideal"] = row["steps_per_s"] / row["ideal_steps_per_s"]
        rows[n] = row
        print(f"  N={n}: {row['ratio_to_ideal']:.3f} of ideal, {row['processes']} processes, "
              f"worker CPU {row['worker_cpu_per_step_s'] * 1e3:.2f} ms/step, shard "
              f"{row['server_cpu_per_step_s'] * 1e3:.2f} ms/step, setup {row['setup_s']:.2f} s, "
              f"load {row['load_average'][0]:.1f}", flush=True)
        if row["ratio_to_ideal"] < stop_below:
            break
    return {"one_worker": one, "by_workers": rows}


def run(quick: bool = False) -> Figure:
    load, date = load_average(), now_iso()
    counts = (8, 16) if quick else WORKER_COUNTS
    steps = 10 if quick else 20
    with ray_local():
        raw = measure_capacity(counts, steps)
    ratios = {n: r["ratio_to_ideal"] for n, r in raw["by_workers"].items()}
    raw.update(gradient_bytes=GRADIENT_BYTES, compute_s=COMPUTE_S, steps_per_worker=steps,
               ratios=ratios, largest={str(t): largest_at(ratios, t) for t in TARGETS})
    checks = tuple(Check(f"largest N at >= {t:g} of ideal", largest_at(ratios, t), n, ">=", "workers")
                   for t, n in TARGETS.items())
    note = "ratio to ideal: " + ", ".join(f"N={n}: {r:.2f}" for n, r in ratios.items())
    return Figure("capacity", "8. sleep-mode workers at the ideal step rate (4 KiB, 100 ms)", checks, raw,
                  load, date, note=note, quick=quick)
