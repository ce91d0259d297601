"""Figure 8: what the simulated model family costs: one simulation of 1024 workers x 100 steps.

In this process (the simulation is plain Python on SimPy, no Ray): the train phase of an
async config with 1024 workers on one shard and a 2-core node, every CPU burst time-shared on
the cores (the calibrated RPC and shard CPU of a laptop-sized profile, jittered compute), so
the cores, the lock and the disk-free step loop all carry load. Timed as CPU seconds of this
process (``time.process_time``: on a shared machine wall time measures the neighbours too),
wall seconds reported beside; events per second are SimPy's scheduled events over CPU time.
Target: under 10 s per simulation on one core.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from testbed.bench.common import Check, Figure, load_average, now_iso
from testbed.config.spec import ConfigFields
from testbed.model.profile import HardwareProfile, StepCpuLine
from testbed.model.simfamily import sim_spec
from testbed.model.simulation import simulate
from testbed.model.terms import step_terms

__all__ = ["run", "measure", "bench_config", "bench_profile", "TARGET_S"]

TARGET_S = 10.0
MS = 1e-3


def bench_profile() -> HardwareProfile:
    """Figures of the order this project's laptop calibration gives (2 cores, ~1 GB/s transfers)."""
    return HardwareProfile(identity={"bench": "simulate"}, cores_per_node=2, server_apply_bytes_per_s=1e8,
                           server_call_overhead_s=50e-6, actor_call_latency_s=0.5 * MS,
                           transfer_bytes_per_s_local=1e9,
                           step_cpu=StepCpuLine(worker_per_step_s=0.3 * MS, server_per_step_s=0.2 * MS),
                           gradient_fill_bytes_per_s=2e9)


def bench_config(workers: int = 1024, steps: int = 100) -> ConfigFields:
    return ConfigFields.model_validate({
        "workers": workers, "gradient_bytes": 1_000_000, "workload": {"steps": steps},
        "compute": {"seconds": 0.05, "jitter": {"distribution": "normal", "cv": 0.1}}})


def measure(workers: int, steps: int, repeats: int) -> dict[str, Any]:
    cfg, prof = bench_config(workers, steps), bench_profile()
    spec = sim_spec(cfg, prof, step_terms(cfg, prof))
    cpu_s, wall_s, events = [], [], 0
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        result = simulate(spec)
        cpu_s.append(time.process_time() - c0)
        wall_s.append(time.perf_counter() - w0)
        events = result.events
    cpu = statistics.median(cpu_s)
    return {"workers": workers, "steps": steps, "repeats": repeats, "events": events,
            "cpu_s": cpu, "wall_s": statistics.median(wall_s), "events_per_s": events / cpu,
            "samples_cpu_s": cpu_s, "samples_wall_s": wall_s,
            "server_utilization": result.server_utilization, "cpu_utilization": result.cpu_utilization}


def run(quick: bool = False) -> Figure:
    load, date = load_average(), now_iso()
    raw = measure(1024, 100, 1 if quick else 3)
    checks = (Check("CPU seconds per 1024x100 simulation", raw["cpu_s"], TARGET_S, "<=", "s"),
              Check("events per CPU second", raw["events_per_s"], raw["events"] / TARGET_S, ">=", "ev/s"))
    return Figure("simulate", "10. simulated model: 1024 workers x 100 steps", checks, raw, load, date,
                  note=f"{raw['events']} SimPy events; wall {raw['wall_s']:.2f} s (the machine's load included); "
                       "events/s target: what the time target needs", quick=quick)
