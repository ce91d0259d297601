"""Per-call costs as curves over the gradient size, and the records that hold them.

A ``SizeCurve`` is a frozen set of measured (bytes, seconds) points read by interpolation:
piecewise-linear in bytes between the points, and beyond them extended along the nearest
end segment (clipped at 0). Per-call costs are a fixed part plus a per-byte part that
changes with the size (Ray passes small arguments inline and large ones through the
object store; caches stop helping past a few MiB), so one straight line through all sizes
misses both ends, and calibration measures the curve instead. ``leave_one_out_residuals``
compares interpolation in bytes with interpolation in log-log on the measured points
(calibration records both; docs/model.md quotes them).

``CallCosts`` holds the curves of one shard count, as measured from single-worker runs of
the testbed itself; ``ReferenceCurves`` holds the microbenchmarks of the same paths (an
actor call carrying the bytes, an object-store put and get, a parameter copy).

Pure: the standard library.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from typing import Any, Optional, Sequence

__all__ = ["SizeCurve", "CallCosts", "ReferenceCurves", "leave_one_out_residuals", "CALL_COST_CURVES",
           "coerce_call_costs", "pooled_means", "INLINE_LIMIT_BYTES", "at_side", "PLAIN_PULL_STEP"]

# Ray passes an argument or a return value smaller than this inline, in the call's own
# message, and a larger one through the object store (``max_direct_call_object_size``).
INLINE_LIMIT_BYTES = 100 * 1024
# Among the worker's figures calibration measured beyond the curves' shard counts
# (``HardwareProfile.small_calls_by_shards``): what a pull of its own adds per shard beyond the
# first at that count, at the smallest size (``testbed.calibration.costs.plain_pull_step_beyond``).
PLAIN_PULL_STEP = "plain_pull_step_s"


def pooled_means(values: Sequence[float], weights: Optional[Sequence[float]] = None) -> list[float]:
    """The non-decreasing weighted least-squares fit of ``values`` in their order (pool adjacent
    violators): a run of values that falls is replaced by its weighted mean. Weights default to 1."""
    blocks: list[list[float]] = []  # [weighted sum, weight, count of values]
    for value, weight in zip(values, weights if weights is not None else [1.0] * len(values)):
        blocks.append([value * weight, float(weight), 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, weight_sum, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += weight_sum
            blocks[-1][2] += count
    return [total / weight_sum for total, weight_sum, count in blocks for _ in range(int(count))]


@dataclasses.dataclass(frozen=True)
class SizeCurve:
    """Seconds against bytes, measured at ``points`` (ascending bytes, seconds >= 0)."""
    points: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        pts = tuple(sorted((float(b), float(s)) for b, s in self.points))
        if not pts:
            raise ValueError("a size curve needs at least one measured point")
        for b, s in pts:
            if not (b > 0 and math.isfinite(b)) or not (s >= 0 and math.isfinite(s)):
                raise ValueError(f"size curve point ({b}, {s}): bytes > 0 and seconds >= 0 required")
        if len({b for b, _ in pts}) != len(pts):
            raise ValueError(f"size curve has a size twice: {[b for b, _ in pts]}")
        object.__setattr__(self, "points", pts)

    @property
    def lo_bytes(self) -> float:
        return self.points[0][0]

    @property
    def hi_bytes(self) -> float:
        return self.points[-1][0]

    def covers(self, nbytes: float) -> bool:
        """Whether ``nbytes`` lies within the measured sizes (reading it is interpolation)."""
        return self.lo_bytes * (1 - 1e-9) <= nbytes <= self.hi_bytes * (1 + 1e-9)

    def at(self, nbytes: float, *, scale: str = "linear") -> float:
        """Seconds at ``nbytes``: exact at a measured point, linear (in bytes, or in log bytes
        and log seconds for ``scale="loglog"``) between two, and along the nearest end
        segment outside the measured range, never below 0."""
        pts = self.points
        if len(pts) == 1:
            b, s = pts[0]
            return s * nbytes / b  # one point: proportional to the size
        xs = [b for b, _ in pts]
        i = min(max(bisect.bisect_left(xs, nbytes), 1), len(pts) - 1)
        (b0, s0), (b1, s1) = pts[i - 1], pts[i]
        if scale == "loglog" and min(s0, s1, nbytes) > 0:
            w = (math.log(nbytes) - math.log(b0)) / (math.log(b1) - math.log(b0))
            return math.exp(math.log(s0) + w * (math.log(s1) - math.log(s0)))
        return max(0.0, s0 + (s1 - s0) * (nbytes - b0) / (b1 - b0))

    def scaled(self, factor: float) -> "SizeCurve":
        return SizeCurve(tuple((b, s * factor) for b, s in self.points))

    def to_list(self) -> list[list[float]]:
        return [[b, s] for b, s in self.points]

    @classmethod
    def coerce(cls, value: Any) -> "SizeCurve":
        """A curve from a curve, a ``{"points": ...}`` dict (as saved) or a list of pairs."""
        if isinstance(value, SizeCurve):
            return value
        if isinstance(value, dict):
            value = value.get("points", ())
        return cls(tuple((b, s) for b, s in value))


def at_side(curve: SizeCurve, nbytes: float, split_bytes: float, above: bool) -> float:
    """``curve`` at ``nbytes``; for bytes that go through the object store (``above``), read
    from the curve's points at or past ``split_bytes`` only, extended down along their first
    segment (flat from a lone point; the whole curve when none or all of its points are there).

    A call's cost steps up where Ray stops passing the bytes inline (``INLINE_LIMIT_BYTES`` a
    slice): one worker, one shard, pulled 131 KiB in 1.46 ms (2026-12-01), where the curve
    read across the step between its 64 KiB (0.69 ms, inline) and 512 KiB (1.55 ms) points said
    0.82 ms; the 512 KiB-2 MiB segment extended down to 131 KiB says 1.41. Below the limit the
    whole curve is read as before: the inline side's points (4 and 64 KiB) are too far below it
    to extend (two workers sync-pulling 93 KiB slices measured 1.05 ms, where the 4-64 KiB
    segment says 0.73 and the whole curve 0.99)."""
    if not above:
        return curve.at(nbytes)
    side = tuple(p for p in curve.points if p[0] >= split_bytes)
    if not side or len(side) == len(curve.points):
        return curve.at(nbytes)
    if len(side) == 1:
        return side[0][1]
    return SizeCurve(side).at(nbytes)


def leave_one_out_residuals(curve: SizeCurve, scale: str) -> list[tuple[float, float]]:
    """(bytes, relative error) at every inner point, predicted from its neighbours alone
    with ``scale`` interpolation: how well that interpolation reads between the points."""
    out = []
    for i in range(1, len(curve.points) - 1):
        b, s = curve.points[i]
        rest = SizeCurve(curve.points[:i] + curve.points[i + 1:])
        guess = rest.at(b, scale=scale)
        out.append((b, (guess - s) / s if s > 0 else 0.0))
    return out


def _curves(record: Any, names: Sequence[str]) -> None:
    for name in names:
        object.__setattr__(record, name, SizeCurve.coerce(getattr(record, name)))


# The curves of ``CallCosts``; ``bytes`` is the whole gradient for a worker's figures and
# one shard's slice (gradient / shards) for a shard's.
CALL_COST_CURVES = {
    "worker_push_s": "a worker's push event alone: until every shard acknowledged (whole gradient)",
    "worker_pull_s": "a worker's pull event alone (whole gradient)",
    "worker_push_cpu_s": "CPU of the worker's process per push (whole gradient)",
    "worker_pull_cpu_s": "CPU of the worker's process per pull (whole gradient)",
    "shard_push_cpu_s": "CPU of one shard's process per push (its slice)",
    "shard_pull_cpu_s": "CPU of one shard's process per pull (its slice)",
    "apply_s": "one shard's apply event (its slice)",
    "step_gap_s": "a worker's step beyond its timed phases: producing and slicing the gradient (whole gradient)",
}


@dataclasses.dataclass(frozen=True)
class CallCosts:
    """Per-call costs of one worker against ``shards`` shards, each a curve over the size."""
    shards: int
    worker_push_s: SizeCurve
    worker_pull_s: SizeCurve
    worker_push_cpu_s: SizeCurve
    worker_pull_cpu_s: SizeCurve
    shard_push_cpu_s: SizeCurve
    shard_pull_cpu_s: SizeCurve
    apply_s: SizeCurve
    step_gap_s: SizeCurve

    def __post_init__(self) -> None:
        if int(self.shards) < 1:
            raise ValueError(f"call costs: shards must be >= 1, got {self.shards}")
        object.__setattr__(self, "shards", int(self.shards))
        _curves(self, tuple(CALL_COST_CURVES))

    def dispatch_fixed_s(self) -> float:
        """o, the fixed part of a shard's call: its CPU per push beyond the apply at the smallest
        calibrated slice, where the bytes cost next to nothing."""
        small = self.shard_push_cpu_s.lo_bytes
        return max(0.0, self.shard_push_cpu_s.at(small) - self.apply_s.at(small))

    @staticmethod
    def read_bytes(name: str, gradient_bytes: float, shards: int) -> float:
        """The size a curve is read at: one shard's slice for a shard's figure, else the gradient."""
        return gradient_bytes / shards if name.startswith("shard_") or name == "apply_s" else float(gradient_bytes)


@dataclasses.dataclass(frozen=True)
class ReferenceCurves:
    """Microbenchmarks of the paths a step takes, over the size (bytes of the payload)."""
    transfer_s: SizeCurve         # an actor call carrying the bytes as its argument, round trip
    store_put_s: SizeCurve        # ray.put of an array of that size
    store_get_s: SizeCurve        # ray.get of it in another process
    copy_s: SizeCurve             # numpy copy of an array of that size (a shard's pull copies its slice)

    def __post_init__(self) -> None:
        _curves(self, ("transfer_s", "store_put_s", "store_get_s", "copy_s"))


def coerce_call_costs(items: Optional[Sequence[Any]]) -> tuple[CallCosts, ...]:
    """Call costs from records or saved dicts, one per shard count, by shard count."""
    out = [c if isinstance(c, CallCosts) else CallCosts(**c) for c in (items or ())]
    if len({c.shards for c in out}) != len(out):
        raise ValueError(f"call_costs has a shard count twice: {[c.shards for c in out]}")
    return tuple(sorted(out, key=lambda c: c.shards))
