"""The knee: the worker count past which adding workers stops paying.

Two definitions, reported side by side:

- *asymptotic knee* ``N* = (Z + sum D) / D_max``: where the two asymptotes of a closed
  network cross, the light-load line ``N / (Z + sum D)`` and the bottleneck cap
  ``1 / D_max``. For one server it is ``(Z + D) / D``: the workers it takes to keep the
  server busy (each uses it D of every Z + D seconds). It ignores queueing, so the real
  curve bends before it.
- *marginal knee*: the smallest n at which going from n to n + 1 workers adds less than
  ``fraction`` (one half) of the linear gain, the rate of one worker alone. It sees the
  queueing below N*, and, applied to the whole job's rate, the init phase too.

Pure: numpy and the standard library.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

__all__ = ["asymptotic_knee", "marginal_knee", "MARGINAL_FRACTION"]

MARGINAL_FRACTION = 0.5


def asymptotic_knee(cycle_at_one_s: float, bottleneck_demand_s: float) -> Optional[float]:
    """N* = (Z + sum D) / D_max, with ``cycle_at_one_s`` = Z + sum D (one worker's cycle alone).

    None when nothing saturates (a bottleneck demand of 0).
    """
    if bottleneck_demand_s <= 0:
        return None
    if cycle_at_one_s < bottleneck_demand_s * (1.0 - 1e-9):
        raise ValueError(f"the cycle ({cycle_at_one_s}) cannot be shorter than one of its demands ({bottleneck_demand_s})")
    # Rounding (e.g. a quadrature mean of 0.9999... for a jitter factor of mean 1) must not
    # put the knee below one worker.
    return max(1.0, cycle_at_one_s / bottleneck_demand_s)


def marginal_knee(rate: np.ndarray, fraction: float = MARGINAL_FRACTION) -> Optional[int]:
    """The smallest n with rate(n + 1) - rate(n) < fraction * rate(1).

    ``rate[i]`` is the rate (useful work per second) with i + 1 workers. None when every
    step of the array still gains at least that much (the knee lies beyond the array).
    """
    rate = np.asarray(rate, dtype=float)
    if rate.ndim != 1 or rate.size < 2:
        raise ValueError("marginal_knee needs the rate for at least 1 and 2 workers")
    if not rate[0] > 0 or not math.isfinite(rate[0]):
        raise ValueError(f"the rate of one worker must be positive and finite, got {rate[0]}")
    # A relative tolerance keeps a perfectly linear curve (gain == rate(1)) from tripping
    # the test through rounding when fraction is close to 1.
    short = np.flatnonzero(np.diff(rate) < fraction * rate[0] * (1.0 - 1e-12))
    return int(short[0]) + 1 if short.size else None
