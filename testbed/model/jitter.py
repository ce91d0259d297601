"""The slowest of n jittered compute times, for the barrier of sync mode.

A worker's compute time per step is ``seconds * f``, with ``f`` drawn from a
distribution of mean 1 and coefficient of variation ``cv`` (the spec's ``compute.jitter``);
negative draws are taken as 0. In async mode only the mean of ``f`` matters (1). In sync
mode every step waits for the slowest of the N workers, so the step pays E[max of N
draws of f], which this module computes. Pure: numpy and the standard library.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["expected_max_factor"]

_GRID_POINTS = 4001


def _cdf(distribution: str, cv: float, x: np.ndarray) -> np.ndarray:
    """CDF of the mean-1 jitter factor at ``x >= 0``."""
    if distribution == "normal":
        z = (x - 1.0) / (cv * math.sqrt(2.0))
        return 0.5 * (1.0 + np.vectorize(math.erf)(z))
    if distribution == "lognormal":
        sigma = math.sqrt(math.log1p(cv * cv))
        mu = -sigma * sigma / 2.0  # keeps the mean at 1
        with np.errstate(divide="ignore"):
            z = (np.log(np.maximum(x, 1e-300)) - mu) / (sigma * math.sqrt(2.0))
        return 0.5 * (1.0 + np.vectorize(math.erf)(z))
    raise ValueError(f"no CDF for jitter distribution {distribution!r}")


def _upper(distribution: str, cv: float) -> float:
    if distribution == "normal":
        return 1.0 + 12.0 * cv
    sigma = math.sqrt(math.log1p(cv * cv))
    return math.exp(-sigma * sigma / 2.0 + 12.0 * sigma)


def expected_max_factor(distribution: str, cv: float, workers: np.ndarray | int) -> np.ndarray:
    """E[max of n i.i.d. jitter factors] for each n in ``workers`` (an array of counts >= 1).

    - none (or cv 0): 1.
    - uniform on [1 - a, 1 + a], a = cv * sqrt(3): 1 - a + 2a n / (n + 1) (a capped at 1).
    - exponential, 1 + cv (E - 1) with E ~ Exp(1): 1 + cv (H_n - 1), H_n the harmonic number.
    - normal, lognormal: the integral of 1 - F(x)^n over x >= 0, by the trapezoid rule.
    """
    n = np.atleast_1d(np.asarray(workers, dtype=float))
    if np.any(n < 1):
        raise ValueError("worker counts must be >= 1")
    if distribution == "none" or cv < 1e-9:  # below that the spread is lost in rounding
        return np.ones_like(n)
    if distribution == "uniform":
        a = min(cv * math.sqrt(3.0), 1.0)
        return 1.0 - a + 2.0 * a * n / (n + 1.0)
    if distribution == "exponential":
        # f = max(0, 1 + cv (E - 1)), E ~ Exp(1) (testbed.emulation.compute); E[max of n E] = H_n.
        # Exact while cv <= 1 (f is never clipped); above, the clip at 0 is ignored.
        harmonic = np.cumsum(1.0 / np.arange(1, int(n.max()) + 1))
        return 1.0 + cv * (harmonic[n.astype(int) - 1] - 1.0)
    if distribution not in ("normal", "lognormal"):
        raise ValueError(f"unknown jitter distribution {distribution!r}")
    x = np.linspace(0.0, _upper(distribution, cv), _GRID_POINTS)
    f = np.clip(_cdf(distribution, cv, x), 0.0, 1.0)
    log_f = np.log(np.maximum(f, 1e-300))
    out = np.empty_like(n)
    # One pass over the grid per count; a knee search asks for 1..n_max (<= 4097) counts.
    for i, count in enumerate(n):
        tail = 1.0 - np.exp(count * log_f)
        out[i] = float(np.sum((tail[1:] + tail[:-1]) * np.diff(x)) / 2.0)
    return out
