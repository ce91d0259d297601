"""Figure 6: how many sleep-mode workers the testbed runs on one machine while the queueing
model still predicts the train phase within 10%.

Real configs through ``testbed.runner.run.run_experiment`` (one run, a sweep over the worker count
N = 8, 16, 32, 64, and 96 when memory allows) with tiny gradients (4 KiB), sleep compute
(100 ms) and 20 steps per worker, against a profile from
``testbed.calibration.calibrate.calibrate(quick=True, with_disk=False)`` measured in the same session.
The queueing model's signed train-phase error (``train_err_queueing``, from
``testbed.analysis.compare``) at each N; the figure is the largest N whose |error| <= 10%, target
>= 64. Each N's measured and predicted per-step phase means are kept, so a miss can be
traced to its term.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import psutil

from testbed.bench.common import Check, Figure, load_average, now_iso, ray_local

__all__ = ["run", "largest_passing", "TARGET_WORKERS", "MAX_ERROR"]

TARGET_WORKERS = 64
MAX_ERROR = 0.10
BYTES_PER_ACTOR = 250 * 2**20  # a Ray worker process holds ~100-150 MB; a margin for the rest of the machine
PHASES = ("compute", "push", "pull", "queue", "apply")


def largest_passing(errors: dict[int, float], max_error: float = MAX_ERROR) -> int:
    """The largest worker count whose |error| <= ``max_error`` (0 when none does)."""
    ok = [n for n, e in errors.items() if e == e and abs(e) <= max_error]
    return max(ok, default=0)


def worker_counts(quick: bool, available_bytes: int) -> list[int]:
    if quick:
        return [4, 8]
    counts = [8, 16, 32, 64]
    if available_bytes > 96 * BYTES_PER_ACTOR + 4 * 2**30:
        counts.append(96)
    return counts


def run(quick: bool = False) -> Figure:
    from testbed.analysis.compare import add_predictions, predict_run
    from testbed.calibration.calibrate import calibrate
    from testbed.config.spec import ExperimentSpec, expand
    from testbed.runner.run import run_experiment

    load, date = load_average(), now_iso()
    counts = worker_counts(quick, psutil.virtual_memory().available)
    steps = 10 if quick else 20
    spec = ExperimentSpec(name="bench-scale", gradient_bytes=4096, compute={"mode": "sleep", "seconds": 0.1},
                          workload={"steps": steps}, sweep={"workers": counts})
    configs = expand(spec)
    with ray_local() as ray, tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        # Measured in this session, not reused from the cache, except in the smoke version.
        profile, _, reused = calibrate(with_disk=False, quick=True, recalibrate=not quick)
        folder = run_experiment(spec, out=Path(tmp) / "run", monitor_interval_s=None)
        summary = folder.summary()
        assert ray.is_initialized()
    predictions = predict_run(configs, profile, ["queueing"])
    compared = add_predictions(summary, predictions).sort_values("workers")
    per_n: dict[str, Any] = {}
    errors: dict[int, float] = {}
    for _, row in compared.iterrows():
        n = int(row["workers"])
        errors[n] = float(row["train_err_queueing"])
        pred = predictions[predictions["config_id"] == row["config_id"]].iloc[0]
        per_n[str(n)] = {
            "train_s": float(row["train_s"]), "train_s_pred": float(row["train_s_pred_queueing"]),
            "train_err": errors[n], "setup_s": float(row["setup_s"]), "steps_per_s": float(row["steps_per_s"]),
            "bound": str(row["bound_queueing"]),
            **{f"{p}_mean_s": float(row.get(f"{p}_mean_s", float("nan"))) for p in PHASES},
            **{f"{p}_mean_s_pred": float(pred.get(f"{p}_mean_s", float("nan"))) for p in PHASES}}
    best = largest_passing(errors)
    raw = {"worker_counts": counts, "steps_per_worker": steps, "gradient_bytes": 4096, "compute_s": 0.1,
           "profile_reused": reused, "largest_passing_workers": best, "by_workers": per_n,
           "available_memory_bytes": psutil.virtual_memory().available}
    checks = (Check("largest N with |train err| <= 10%", best, TARGET_WORKERS, ">=", "workers"),)
    note = "train errors (queueing): " + ", ".join(f"N={n}: {e:+.1%}" for n, e in errors.items())
    return Figure("scale", "6. sleep-mode workers on one machine within 10% train error", checks, raw, load, date,
                  note=note, quick=quick)
