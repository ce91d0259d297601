"""The per-call level a profile is scaled by (pure): ``scale_call_curves``, which the
calibration's ``apply_call_level`` uses to put a profile at the level ``testbed validate``'s
check measured in its Ray session (``testbed.calibration.level``).

Tried after 2026120715 and taken out after 2026120717: the simulated family reading that level
in proportion to each config's idle cores (the factor 1 + (r - 1)(1 - U), U the cores' simulated
utilisation). It came from 2026120715, whose check read x2.74 at 4 KiB and whose loaded configs
ran near the calibration's level (push +42 % signed with the whole level, +4 % felt); held out on
2026120716 (check x1.28) train went 9.2 -> 8.4 % at the median but 28.3 -> 30.9 % at p90 and pull
23 -> 28 %, and on 2026120717 (check x0.68) 5.1 / 26.3 % -> 9.9 / 43.0 %, push 23 -> 39 %: the
loaded configs followed the level there. docs/model.md, "The level, felt in proportion to the
idle cores (tried, taken out)".
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

from testbed.model.curves import PLAIN_PULL_STEP, SizeCurve
from testbed.model.profile import HardwareProfile
from testbed.model.scheduler import load_curve_at

__all__ = ["FIGURES", "SMALL_CALLS", "ratio_at", "scale_call_curves"]

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
