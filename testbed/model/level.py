"""The per-call level a profile was scaled by, and how much of it a config's cores feel (pure).

``testbed validate`` checks the per-call cost level of its Ray session against the profile's
curves (``testbed.calibration.level``: one worker, one shard, sleeping between steps) and
scales every per-call curve by it; the check and the levels applied are kept as the profile's
``call_level``. This module holds the scaling itself (``scale_call_curves``, used by the
calibration's ``apply_call_level``) and its reading per config (``level_felt``).

Why a config feels only part of the level: what moves between sessions on the 2-core VM is the
cost of a call between processes that idle (the check's sleeping worker and its shard), not the
CPU work of a loaded node. Side by side on 2026-12-07 (one Ray session after another, 15:01 to
15:30), a one-worker 4 KiB push read 0.82 ms in the calibration of 15:01, 1.53 ms in that of
15:14 and 1.9-2.5 ms from 15:23 on (a bare actor call 0.65-0.74 ms, then 1.5-2.5), while a
pure-Python loop held within 12 %; the held-out draw 2026120715, checked at x2.74 / 1.91 / 1.29
(4 KiB / 512 KiB / 8 MiB) against the calibration of 15:01, had its one-worker and sleeping
small-gradient configs run at about x1.3-1.9 of the calibration and its spinning and
many-worker large-gradient ones at x0.8-1.1: the level, applied to all, put the push +42 % long
at the median; left out, -10 %. docs/model.md, "The level, felt in proportion to the idle cores".

So the simulated family reads the level in proportion to the node's idle share in the config:
the factor ``1 + (r - 1) * (1 - U)`` where ``r`` is the check's level at a call's size and ``U``
the cores' simulated utilisation (``level_felt``); ``U`` comes from simulating the config at
the full level first (``testbed.model.prediction``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

from testbed.model.curves import PLAIN_PULL_STEP, SizeCurve
from testbed.model.profile import HardwareProfile
from testbed.model.scheduler import load_curve_at

__all__ = ["FIGURES", "SMALL_CALLS", "ratio_at", "scale_call_curves", "checked_levels", "level_felt"]

# The figures the check measures, and the per-call curves each one scales.
FIGURES = {
    "push": ("worker_push_s",),
    "pull": ("worker_pull_s",),
    "worker_cpu": ("worker_push_cpu_s", "worker_pull_cpu_s"),
    "shard_cpu": ("shard_push_cpu_s", "shard_pull_cpu_s"),
    "apply": ("apply_s",),
    "step_gap": ("step_gap_s",),
}
# The worker-side figures beyond the curves' shard counts (``small_calls_by_shards`` and the
# like), each with the check's figure that scales it.
SMALL_CALLS = {"worker_push_s": "push", "worker_pull_s": "pull", "worker_push_cpu_s": "worker_cpu",
               "worker_pull_cpu_s": "worker_cpu", PLAIN_PULL_STEP: "pull"}


def ratio_at(rows: list[list[float]], nbytes: float) -> float:
    """The ratio at ``nbytes``: linear in log bytes between the checked sizes, flat past them
    (the scheduler curves' clamped reading, on log bytes); 1 with no rows."""
    if not rows:
        return 1.0
    return load_curve_at([(math.log(b), r) for b, r in rows], math.log(nbytes))


def scale_call_curves(profile: HardwareProfile, factor: Callable[[str, float], float]) -> HardwareProfile:
    """``profile`` with every per-call curve (each shard count's, and the figures beyond them)
    scaled by ``factor(figure, bytes)`` at each point's size (``figure``: a key of ``FIGURES``).
    The figures beyond the curves' counts are read at the size their step was measured at; a
    plain push's answer is a small call (the push figure at the smallest size); a plain pull's
    step per shard is a pull figure measured at two shards (its slice's gradient there). The
    profile's ``call_level`` is kept as it is."""
    def scaled(curve: SizeCurve, figure: str) -> SizeCurve:
        return SizeCurve(tuple((b, s * factor(figure, b)) for b, s in curve.points))

    costs = []
    for c in profile.call_costs:
        changes = {curve: scaled(getattr(c, curve), figure) for figure, curves in FIGURES.items() for curve in curves}
        costs.append(dataclasses.replace(c, **changes))
    size = profile.call_costs[0].worker_push_s.lo_bytes if profile.call_costs else 0.0

    def beyond(by_shards: dict[int, dict[str, float]], at: float) -> dict[int, dict[str, float]]:
        return {k: {n: v * (factor(SMALL_CALLS[n], at) if n in SMALL_CALLS and at > 0 else 1.0)
                    for n, v in figures.items()} for k, figures in by_shards.items()}
    small = beyond(profile.small_calls_by_shards, size)
    large = beyond(profile.large_calls_by_shards, float(profile.large_calls_bytes or size))
    larger = beyond(profile.larger_calls_by_shards, float(profile.larger_calls_bytes or size))
    push_return = profile.push_return_s * factor("push", size) \
        if profile.push_return_s is not None and size > 0 else profile.push_return_s
    step = profile.plain_pull_step_s
    if step is not None:
        step = SizeCurve(tuple((b, v * factor("pull", 2 * b)) for b, v in step.points))
    return dataclasses.replace(profile, call_costs=tuple(costs), small_calls_by_shards=small,
                               large_calls_by_shards=large, larger_calls_by_shards=larger,
                               push_return_s=push_return, plain_pull_step_s=step)


def checked_levels(profile: HardwareProfile) -> list[list[float]]:
    """``[bytes, level]`` the profile's curves were scaled by at each checked size (a check
    that ran and applied one set of levels to every figure), else ``[]``: no check, a failed
    one, or one whose levels differ by figure (an older record)."""
    record = profile.call_level or {}
    levels = record.get("levels")
    if record.get("failed") or not levels:
        return []
    return [[float(b), float(v)] for b, v in levels]


def level_felt(profile: HardwareProfile, idle_share: float) -> HardwareProfile:
    """``profile`` (scaled by its check's levels) at the part of those levels a config whose
    node is idle ``idle_share`` of the time feels: each curve's point at ``bytes`` multiplied by
    ``(1 + (r - 1) * idle_share) / r``, ``r`` the check's level there. ``idle_share`` 1 leaves
    the profile as it is, 0 puts it back at the calibration's own level; a profile without a
    check comes back unchanged."""
    rows = checked_levels(profile)
    w = min(1.0, max(0.0, float(idle_share)))
    if not rows or w >= 1.0:
        return profile

    def factor(_: str, nbytes: float) -> float:
        r = ratio_at(rows, nbytes)
        return (1.0 + (r - 1.0) * w) / r if r > 0 else 1.0
    return scale_call_curves(profile, factor)
