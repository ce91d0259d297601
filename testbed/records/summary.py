"""Summaries derived from events, never recorded separately.

One row per config and repeat: the config's knobs, the driver-measured phase spans
(setup, init, train), the emulated job ``job_s = init_s + train_s`` (what the model
predicts; setup is the testbed's own actor start-up, shown beside it), ``total_s`` (all
three), the aggregate step rate, and the mean of each per-step phase (``<phase>_mean_s``).
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import pandas as pd

from testbed.config.spec import Workload
from testbed.records.events import Phase, Role
from testbed.records.manifest import Finished

__all__ = ["steal_by_config", "summarize", "SUMMARY_COLUMNS", "STEP_PHASES", "config_columns", "SHOWN_COLUMNS", "SHOWN_KNOBS",
           "shown_columns"]

# Per-step phases whose mean duration the summary reports, in step order.
STEP_PHASES = (Phase.READ, Phase.COMPUTE, Phase.PUSH, Phase.PULL, Phase.BARRIER, Phase.QUEUE, Phase.APPLY,
               Phase.INIT_READ, Phase.INIT_WAIT, Phase.LINK_IN, Phase.LINK_OUT, Phase.READ_RUNQ)

SUMMARY_COLUMNS = [
    "experiment", "config_id", "repeat", "workers", "servers", "sync", "staleness", "apply_seconds",
    "gradient_bytes", "compute_mode",
    "compute_s", "steps", "pull_every", "dataset_bytes", "init_io", "partition", "status",
    "setup_s", "init_s", "train_s", "job_s", "total_s", "steps_per_s", "updates",
    "restarts", "restart_s", "lost_updates",
] + [f"{p.value}_mean_s" for p in STEP_PHASES] + ["worker_cpu_per_step_s", "server_cpu_per_step_s", "staleness_mean",
                                                  "staleness_p50", "staleness_p99", "staleness_max"]


# The summary's columns worth reading at a glance, in the order every view shows them (the
# report's summary table, the notebooks' ``summary_table``, the console after a run); the
# CSV keeps all of ``SUMMARY_COLUMNS``. ``group`` is added by the comparison (analysis).
SHOWN_KNOBS = ("sync", "gradient_bytes", "init_io", "partition", "status")
SHOWN_COLUMNS = ["config_id", "repeat", "group", "workers", "servers", *SHOWN_KNOBS,
                 "setup_s", "init_s", "train_s", "total_s", "steps_per_s",
                 "read_mean_s", "compute_mean_s", "push_mean_s", "pull_mean_s", "barrier_mean_s",
                 "queue_mean_s", "apply_mean_s", "staleness_mean"]


def shown_columns(summary: pd.DataFrame, *, varying_knobs_only: bool = False) -> list[str]:
    """The ``SHOWN_COLUMNS`` that ``summary`` has and measured (not NaN on every row; a phase
    that never happened is left out). ``varying_knobs_only``: also leave out the knobs
    (``SHOWN_KNOBS``) that are the same on every row, for the compact views."""
    shown = [c for c in SHOWN_COLUMNS if c in summary and not summary[c].isna().all()]
    if varying_knobs_only and len(summary) > 0:
        shown = [c for c in shown if c not in SHOWN_KNOBS or summary[c].nunique(dropna=False) > 1]
    return shown

def config_columns(cfg: dict[str, Any]) -> dict[str, Any]:
    """The knobs of a config (as dumped in the manifest) that the summary carries."""
    workload = cfg["workload"]
    steps = Workload.model_validate(workload).steps_per_worker(cfg["workers"])
    return {
        "experiment": cfg.get("experiment", ""), "config_id": cfg["config_id"], "workers": cfg["workers"],
        "servers": cfg["servers"], "sync": cfg["sync"], "staleness": cfg["staleness"],
        "apply_seconds": cfg["apply_seconds"], "gradient_bytes": cfg["gradient_bytes"],
        "compute_mode": cfg["compute"]["mode"], "compute_s": cfg["compute"]["seconds"], "steps": steps,
        "pull_every": cfg["pull_every"], "dataset_bytes": workload["dataset_bytes"],
        "init_io": cfg["data"]["init_io"], "partition": cfg["data"]["partition"],
    }


def _span_s(frame: pd.DataFrame, phase: Phase) -> float:
    rows = frame[(frame["role"] == Role.DRIVER.value) & (frame["phase"] == phase.value)]
    return float(rows["duration_ns"].sum()) / 1e9 if len(rows) else float("nan")


def _cpu_per_step(finished: Iterable[Finished]) -> dict[tuple[str, int], tuple[float, float]]:
    """(worker, server) CPU seconds per step of each finished config repeat, from the manifest."""
    out = {}
    for f in finished:
        cpu = f.train_cpu_s
        if not cpu:
            continue
        out[f.key] = (
            sum(v for a, v in cpu.items() if a.startswith("worker-")),
            sum(v for a, v in cpu.items() if a.startswith("server-")))
    return out


def summarize(events: pd.DataFrame, configs: Iterable[dict[str, Any]],
              finished: Iterable[Finished | dict[str, Any]],
              statuses: dict[tuple[str, int], str] | None = None) -> pd.DataFrame:
    """One row per (config, repeat) present in ``events``, in config order.

    ``finished``: the manifest's entries (required: a summary without them would show no
    lost updates and no CPU), which give each row its status, the updates the shards lost
    with a crash (a count the shards keep, not an event) and the actors' CPU during training
    (read from the processes, not an event); ``statuses`` overrides. ``restarts`` and
    ``restart_s`` (the lost time) come from the ``restart`` events. Callers with a run folder
    use ``RunFolder.summary()``."""
    finished = [f if isinstance(f, Finished) else Finished.model_validate(f) for f in finished]
    cpu = _cpu_per_step(finished)
    finished = {f.key: f for f in finished}
    statuses = {**{k: f.status.value for k, f in finished.items()}, **(statuses or {})}
    by_id = {c["config_id"]: c for c in configs}
    rows = []
    if len(events):
        groups = events.groupby(["config_id", "repeat"], sort=False)
    else:
        groups = []
    for (config_id, repeat), frame in groups:
        cfg = by_id.get(config_id)
        if cfg is None:
            continue
        row = config_columns(cfg)
        row["repeat"] = int(repeat)
        row["status"] = statuses.get((config_id, int(repeat)), "ok")
        row["setup_s"] = _span_s(frame, Phase.SETUP)
        row["init_s"] = _span_s(frame, Phase.INIT)
        row["train_s"] = _span_s(frame, Phase.TRAIN)
        row["job_s"] = row["init_s"] + row["train_s"]
        row["total_s"] = row["setup_s"] + row["job_s"]
        pushes = frame[(frame["role"] == Role.WORKER.value) & (frame["phase"] == Phase.PUSH.value)]
        applies = frame[(frame["role"] == Role.SERVER.value) & (frame["phase"] == Phase.APPLY.value)]
        row["steps_per_s"] = len(pushes) / row["train_s"] if row["train_s"] > 0 else float("nan")
        row["updates"] = len(applies)
        restarts = frame[frame["phase"] == Phase.RESTART.value]
        row["restarts"] = len(restarts)
        row["restart_s"] = float(restarts["duration_ns"].sum()) / 1e9
        entry = finished.get((config_id, int(repeat)))
        row["lost_updates"] = sum(entry.lost_updates) if entry is not None else 0
        worker_cpu, server_cpu = cpu.get((config_id, int(repeat)), (np.nan, np.nan))
        row["worker_cpu_per_step_s"] = worker_cpu / len(pushes) if len(pushes) else np.nan
        row["server_cpu_per_step_s"] = server_cpu / len(pushes) if len(pushes) else np.nan
        for phase in STEP_PHASES:
            durations = frame.loc[frame["phase"] == phase.value, "duration_ns"]
            row[f"{phase.value}_mean_s"] = float(durations.mean()) / 1e9 if len(durations) else float("nan")
        stale = applies.loc[applies["staleness"] >= 0, "staleness"].to_numpy()
        if len(stale):
            row.update(staleness_mean=float(stale.mean()), staleness_p50=float(np.percentile(stale, 50)),
                       staleness_p99=float(np.percentile(stale, 99)), staleness_max=float(stale.max()))
        else:
            row.update(staleness_mean=np.nan, staleness_p50=np.nan, staleness_p99=np.nan, staleness_max=np.nan)
        rows.append(row)
    frame = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    order = {c["config_id"]: i for i, c in enumerate(by_id.values())}
    if len(frame):
        frame = frame.sort_values(["config_id", "repeat"], key=lambda s: s.map(order) if s.name == "config_id" else s)
    return frame.reset_index(drop=True)


def steal_by_config(samples: pd.DataFrame) -> pd.Series:
    """Each config repeat's mean hypervisor steal (``cpu_steal_percent``) over its monitor
    samples that have the figure, indexed by (config_id, repeat); empty for samples without the
    column (folders made before it) or without a figure."""
    if "cpu_steal_percent" not in samples:
        return pd.Series(dtype="float64")
    stolen = samples.dropna(subset=["cpu_steal_percent"])
    return stolen.groupby(["config_id", "repeat"])["cpu_steal_percent"].mean()
