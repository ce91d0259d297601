"""The step reads' level in the session that runs the configs, checked against the profile's curves.

A step read after a pause costs its back-to-back read plus a wake-up (``testbed.model.reads``),
and on the 2-core virtio VM this testbed was built on that wake-up moves more than any
per-call cost: one calibration's 4 KiB sequential read after 20 ms of sleep was 114 us at
15:00, 239 us at 16:00 and 772 us at 17:00 on 2026-12-07, and the same probe run every 15 s
for three and a half minutes from 17:53 read 377 to 1493 us (median ~600: docs/model.md, "The
step reads' level, checked in the runs' session"). Calibration measures it in one window of a
few seconds, so a draw's step reads all erred the way that window did: over the held-out
draws of that day every step read of 2026120716 ran long (-14 to -71 %), and the small
one-worker reads of 2026120717 ran 2-3 x short of a calibration made in a slow hour.

So ``testbed validate``, when a config reads every step, re-measures the reads the curves were
made from (4 KiB, back to back and after ``CHECK_PAUSE_S`` of sleep, both orders) in the runs'
session, once after each round of the per-call check (``testbed.calibration.level``: a round
every ~7 s, so the windows are spread over the check's ~25 s); applied, it would put the curves
at that level (``StepReadCosts.at_level``): per order, the back-to-back reads move by what the check's
back-to-back read moved (the device's latency, additive over sizes), and every pause's
wake-up is scaled by the check's wake-up over the curve's at ``CHECK_PAUSE_S``. The check's
reads are pooled over its rounds (means, as the curves hold means).

Recorded, not applied. Held out twice with the curves put at the check's level, the reads did
no better than at the calibration's (2026120719: read median 51 -> 49 %, the check reading the
calibration's level) and then worse (2026120720: 24 -> 40 %, the check's wake-ups x1.2-1.3 where
the runs' small reads were as short as calibrated). So ``testbed validate`` keeps the check in
the profile (``read_level``, with ``applied: false``) and predicts with the calibration's curves;
``apply_read_level`` re-predicts a folder with it, for whoever revisits the question.

``read_level_from_samples`` and ``apply_read_level`` are pure; ``measure_read_round`` needs Ray.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import os
import statistics
from typing import Sequence

from testbed.model.profile import HardwareProfile
from testbed.model.reads import READ_ORDERS, PausedReadCurve, StepReadCosts

__all__ = ["CHECK_BYTES", "CHECK_PAUSE_S", "CHECK_READS", "CHECK_HOT_READS", "WAKE_RATIO_BOUNDS",
           "read_level_from_samples", "apply_read_level", "without_read_level", "failed_read_level", "measure_read_round", "ReadRound"]

KIB, MIB = 2**10, 2**20
CHECK_BYTES = 4 * KIB
# The middle of calibration's pauses (5, 20, 100 ms): the wake-up there is what a worker of the
# validation space's compute (5-100 ms) mostly pays.
CHECK_PAUSE_S = 0.02
# Reads per order and round after the pause (~0.5 s a round for both orders) and back to back.
CHECK_READS = 20
CHECK_HOT_READS = 40
# A ratio beyond these is taken as the bound: the wake-up moved 7 x within two hours on the VM
# above (a round of a broken probe could say anything).
WAKE_RATIO_BOUNDS = (0.1, 10.0)
# The probe's file: as calibration's (a smaller one reads differently on a virtual disk's cache).
CHECK_FILE_BYTES = 64 * MIB


@dataclasses.dataclass(frozen=True)
class ReadRound:
    """One round of the check: per order, the seconds of each back-to-back and each paused read."""
    hot_s: dict[str, list[float]]
    paused_s: dict[str, list[float]]
    mode: str = ""


def read_level_from_samples(step_reads: StepReadCosts, rounds: Sequence[ReadRound]) -> dict:
    """The read level of ``rounds`` against ``step_reads``: per order, the pooled back-to-back
    and paused means, the calibrated ones at the same cell, the shift of the back-to-back read
    and the ratio of the wake-ups (bounded by ``WAKE_RATIO_BOUNDS``; 1 where the calibrated
    wake-up is 0, which a ratio cannot scale). Orders the rounds did not read are left out."""
    lo, hi = WAKE_RATIO_BOUNDS
    by_order: dict[str, dict] = {}
    for order in READ_ORDERS:
        hot = [x for r in rounds for x in r.hot_s.get(order, [])]
        paused = [x for r in rounds for x in r.paused_s.get(order, [])]
        if not hot or not paused or order not in step_reads.orders():
            continue
        hot_m, paused_m = statistics.fmean(hot), statistics.fmean(paused)
        cal_hot = step_reads.read_s(order, CHECK_BYTES, 0.0)
        cal_paused = step_reads.read_s(order, CHECK_BYTES, CHECK_PAUSE_S)
        cal_wake, wake = max(0.0, cal_paused - cal_hot), max(0.0, paused_m - hot_m)
        ratio = min(hi, max(lo, wake / cal_wake)) if cal_wake > 0 and math.isfinite(wake) else 1.0
        by_order[order] = {"hot_s": hot_m, "paused_s": paused_m, "reads": [len(hot), len(paused)],
                           "calibrated_hot_s": cal_hot, "calibrated_paused_s": cal_paused,
                           # never more than the whole back-to-back read off it
                           "hot_shift_s": max(-cal_hot, hot_m - cal_hot), "wake_ratio": ratio}
    return {"measured": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "bytes": CHECK_BYTES, "pause_s": CHECK_PAUSE_S, "rounds": len(rounds),
            "mode": rounds[0].mode if rounds else "", "orders": by_order}


def apply_read_level(profile: HardwareProfile, record: dict) -> HardwareProfile:
    """``profile`` with its step-read curves at ``record``'s level (``StepReadCosts.at_level``),
    ``record`` kept as ``read_level``; a profile without step-read curves only keeps the record."""
    reads = profile.step_reads
    if reads is None or not record.get("orders"):
        return dataclasses.replace(profile, read_level=record)
    orders = record["orders"]
    leveled = reads.at_level({o: v["hot_shift_s"] for o, v in orders.items()},
                             {o: v["wake_ratio"] for o, v in orders.items()})
    # The curves as they were, so that a folder can be re-predicted without the check.
    record = {**record, "calibrated_curves": [dataclasses.asdict(c) for c in reads.curves]}
    return dataclasses.replace(profile, step_reads=leveled, read_level=record)


def without_read_level(profile: HardwareProfile) -> HardwareProfile:
    """``profile`` with the step-read curves calibration measured, before any check's level
    (an ablation: ``testbed residuals --repredict`` on a folder whose check is to be left out)."""
    record = profile.read_level or {}
    if profile.step_reads is None or "calibrated_curves" not in record:
        return dataclasses.replace(profile, read_level=None)
    curves = tuple(PausedReadCurve(**c) for c in record["calibrated_curves"])
    return dataclasses.replace(profile, step_reads=dataclasses.replace(profile.step_reads, curves=curves),
                               read_level=None)


def failed_read_level(reason: str) -> dict:
    """The ``read_level`` of a profile whose read check failed: the calibration's curves stand."""
    return {"measured": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "failed": reason}


def measure_read_round(directory: str, *, block_bytes: int = MIB, cache_bypass: bool = True) -> ReadRound:
    """One round of the check in an actor on the Ray this process is connected to (the probe
    calibration uses, ``actors.readprobe.ReadProbe``; about 1.5 s with the file's writing)."""
    import ray

    from actors.readprobe import ReadProbe

    hot_cells = [(order, CHECK_BYTES) for order in READ_ORDERS]
    paused_cells = [(order, CHECK_BYTES, CHECK_PAUSE_S) for order in READ_ORDERS]
    probe = ray.remote(ReadProbe).options(num_cpus=0).remote()
    try:
        hot_s, paused_s, mode = ray.get(probe.sweep_s.remote(os.path.expanduser(directory), CHECK_FILE_BYTES,
                                                             hot_cells, paused_cells, CHECK_HOT_READS, CHECK_READS,
                                                             block_bytes, cache_bypass))
    finally:
        ray.kill(probe)
    return ReadRound({o: list(xs) for (o, _), xs in zip(hot_cells, hot_s)},
                     {o: list(xs) for (o, _, _), xs in zip(paused_cells, paused_s)}, mode)

