"""Stragglers: a worker whose compute takes f times longer from step k on.

First-order model, the same for every family: a straggler runs the others' step plus
(f - 1) c for each slowed step; nothing else changes (its lighter load on the server is
neglected, so the others' steps are predicted as without it).

- ``async`` and ``ssp``: every worker runs a fixed number of steps, so the train phase
  ends when the slowest worker does: the plain train time plus the largest straggler's
  extra time. (In ``ssp`` the others are held back to the straggler's pace once it is
  ``staleness`` steps behind, but they still finish no later than it.)
- ``sync``: every step waits for its slowest worker, so each step pays the largest
  (f - 1) c among the workers slowed at that step.

The measured ``compute`` mean is over every worker's steps, so the predicted one is
c (1 + sum over stragglers of (f - 1) x slowed steps / (N x steps)).

Pure: reads ``config.faults`` by attribute (entries with ``kind == "straggler"``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["stragglers", "straggler_extra_s", "straggler_compute_factor"]


def stragglers(config: Any) -> list[tuple[int, float, int]]:
    """(worker, factor, from_step) of each straggler fault of the config."""
    return [(int(f.worker), float(f.factor), int(f.from_step))
            for f in getattr(config, "faults", ()) if getattr(f, "kind", None) == "straggler"]


def straggler_extra_s(config: Any, compute_s: float, steps: int, sync: bool) -> float:
    """Seconds the stragglers add to the train phase."""
    slow = stragglers(config)
    if not slow or compute_s <= 0:
        return 0.0
    if not sync:
        return max((f - 1.0) * compute_s * max(0, steps - k) for _, f, k in slow)
    # sync: each step pays its slowest straggler; walk the steps where the set changes.
    starts = sorted({min(k, steps) for _, _, k in slow} | {steps})
    extra = 0.0
    for a, b in zip(starts, starts[1:]):
        worst = max(((f - 1.0) for _, f, k in slow if k <= a), default=0.0)
        extra += worst * compute_s * (b - a)
    return extra


def straggler_compute_factor(config: Any, steps: int, workers: int) -> float:
    """The mean compute event over all workers and steps, relative to c."""
    slow = stragglers(config)
    if not slow or steps <= 0:
        return 1.0
    return 1.0 + sum((f - 1.0) * max(0, steps - k) for _, f, k in slow) / (workers * steps)
