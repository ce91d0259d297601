"""Figure 9: actor start-up (the ``setup`` span) against the number of actors.

Real configs through ``testbed.runner.run.run_config`` on a fresh local Ray (4 KiB
gradients, 1 ms sleep, 2 steps: only setup matters): first one process per worker
(``workers_per_process: 1``) at N = 1, 2, 4, 8, 16, so setup against processes started
(N + 1 with the shard); then the testbed's own choice of virtual workers at N = 16, 64, 128,
where the processes stay a small multiple of the cores. Ray starts at most as many worker
processes at once as the node has cores, and each one's start (interpreter, imports) is
CPU work, so setup grows with processes, not with workers.
Target: a 64-worker config sets up in <= 5 s.
"""

from __future__ import annotations

from typing import Any, Optional

from testbed.bench.common import Check, Figure, load_average, now_iso, ray_local

__all__ = ["run", "setup_of", "TARGET_S", "TARGET_WORKERS"]

TARGET_S = 5.0
TARGET_WORKERS = 64


def setup_of(workers: int, per_process: Optional[int], repeat: int) -> dict[str, Any]:
    from testbed.config.spec import ExperimentSpec, expand
    from testbed.runner.run import run_config
    spec = ExperimentSpec(name="bench-setup", workers=workers, workers_per_process=per_process,
                          gradient_bytes=4096, compute={"mode": "sleep", "seconds": 0.001}, workload={"steps": 2})
    cfg, = expand(spec)
    out = run_config(cfg, repeat, "bench-setup")
    setup = [d for p, a, d in zip(out.columns["phase"], out.columns["actor"], out.columns["duration_ns"])
             if p == "setup" and a == "driver"]
    processes = len(out.worker_processes)
    return {"workers": workers, "worker_processes": processes, "actors": processes + cfg.servers,
            "setup_s": setup[0] / 1e9, "load_average": load_average()}


def run(quick: bool = False) -> Figure:
    load, date = load_average(), now_iso()
    one_each = (1, 2, 4) if quick else (1, 2, 4, 8, 16)
    virtual = (16, 64) if quick else (16, 64, 128)
    rows: list[dict[str, Any]] = []
    with ray_local():
        setup_of(1, None, 0)  # the session's first actors also pay for Ray's own warm-up: not counted
        for n in one_each:
            rows.append({**setup_of(n, 1, 0), "mode": "process per worker"})
        for n in virtual:
            rows.append({**setup_of(n, None, 0), "mode": "virtual workers"})
    for r in rows:
        print(f"  {r['mode']}: N={r['workers']}, {r['actors']} actors: setup {r['setup_s']:.2f} s "
              f"(load {r['load_average'][0]:.1f})", flush=True)
    target = next(r["setup_s"] for r in rows if r["mode"] == "virtual workers" and r["workers"] == TARGET_WORKERS)
    per_actor = [r["setup_s"] / r["actors"] for r in rows if r["mode"] == "process per worker" and r["actors"] >= 3]
    raw = {"rows": rows, "setup_s_per_actor_process_per_worker": per_actor}
    checks = (Check(f"setup of a {TARGET_WORKERS}-worker config", target, TARGET_S, "<=", "s"),)
    note = "; ".join(f"{r['mode']} N={r['workers']} ({r['actors']} actors): {r['setup_s']:.2f} s" for r in rows)
    return Figure("setup", "9. actor start-up against actors started", checks, raw, load, date, note=note,
                  quick=quick)
