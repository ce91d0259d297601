"""What a worker does per step, as plain objects: draw a compute duration, spend it,
and produce a gradient. No Ray; clock, sleep and random source are passed in.

Drawing random numbers (``ComputePlan``) and spending time (``ComputeEmulator``)
are separate so each can be tested alone.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np

from testbed.config.spec import Compute, ComputeMode, JitterDist

__all__ = ["spin", "GradientSource", "ComputePlan", "ComputeEmulator", "initial_parameters", "gradient_scale",
           "matmul_size"]


def spin(seconds: float, clock: Callable[[], float] = time.perf_counter) -> None:
    """Busy-wait until ``seconds`` have passed on ``clock``: a core held, nothing slept."""
    deadline = clock() + seconds
    while clock() < deadline:
        pass


def gradient_scale(step: int) -> np.float32:
    """The per-step factor of a worker's gradient: cycles through 1, 1.125, ... 1.875.

    Powers of two over eight keep ``base * scale`` exact in float32, so a test can
    recompute every gradient bit for bit.
    """
    return np.float32(1.0 + (step % 8) / 8.0)


class GradientSource:
    """Deterministic gradients of ``elements`` float32 values for one worker.

    The base vector is drawn once from ``(seed, worker)``; step k's gradient is
    ``base * gradient_scale(k)``, written into one preallocated buffer, so producing
    a gradient allocates nothing and costs one pass over memory.
    """

    def __init__(self, seed: int, worker: int, elements: int) -> None:
        rng = np.random.default_rng([seed, 1, worker])
        self.base = rng.standard_normal(elements, dtype=np.float32)
        self._buf = np.empty_like(self.base)

    def fill(self, step: int) -> np.ndarray:
        np.multiply(self.base, gradient_scale(step), out=self._buf)
        return self._buf

    def expected_sum(self, steps: int) -> np.ndarray:
        """The sum of this worker's first ``steps`` gradients (for checks), in float64."""
        total = sum(float(gradient_scale(k)) for k in range(steps))
        return self.base.astype(np.float64) * total


def initial_parameters(seed: int, lo: int, hi: int) -> np.ndarray:
    """The initial values of parameters [lo, hi): the same slice whatever the shard layout."""
    # Draw in fixed 1 Mi-element blocks so any slice is reproducible without drawing all.
    block = 1 << 20
    out = np.empty(hi - lo, dtype=np.float32)
    pos = lo
    while pos < hi:
        b = pos // block
        block_rng = np.random.default_rng([seed, 2, b])
        start = pos - b * block
        stop = min(block, hi - b * block)
        values = block_rng.standard_normal(stop, dtype=np.float32)[start:stop]
        out[pos - lo: pos - lo + len(values)] = values
        pos += len(values)
    return out


class ComputePlan:
    """Draws each step's compute duration (sleep, spin) from the worker's seeded generator.

    The jitter factor has mean 1 and coefficient of variation ``cv``; it is never negative.
    """

    def __init__(self, compute: Compute, rng: np.random.Generator, slowdown: Callable[[int], float] | None = None) -> None:
        self.compute = compute
        self.rng = rng
        self.slowdown = slowdown

    def factor(self) -> float:
        j = self.compute.jitter
        cv = j.cv
        if j.distribution is JitterDist.NONE or cv == 0:
            return 1.0
        if j.distribution is JitterDist.UNIFORM:
            a = min(cv * math.sqrt(3.0), 1.0)
            return float(self.rng.uniform(1 - a, 1 + a))
        if j.distribution is JitterDist.NORMAL:
            return max(0.0, float(self.rng.normal(1.0, cv)))
        if j.distribution is JitterDist.LOGNORMAL:
            sigma = math.sqrt(math.log1p(cv * cv))
            return float(self.rng.lognormal(-sigma * sigma / 2, sigma))
        if j.distribution is JitterDist.EXPONENTIAL:
            return max(0.0, 1.0 + cv * (float(self.rng.exponential(1.0)) - 1.0))
        raise AssertionError(j.distribution)

    def duration_s(self, step: int) -> float:
        d = self.compute.seconds * self.factor()
        if self.slowdown is not None:
            d *= self.slowdown(step)
        return d


def matmul_size(flops: float) -> int:
    """Side n of the square matmul whose 2 n^3 FLOPs come closest to ``flops``."""
    return max(1, round((flops / 2.0) ** (1.0 / 3.0)))


class ComputeEmulator:
    """Spends one step's compute: sleeps, spins, or multiplies matrices."""

    def __init__(self, compute: Compute, plan: ComputePlan, *, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.mode = compute.mode
        self.plan = plan
        self._sleep = sleep
        self._clock = clock
        if self.mode is ComputeMode.MATMUL:
            n = matmul_size(compute.flops)
            rng = np.random.default_rng(0)
            self._a = rng.standard_normal((n, n), dtype=np.float32)
            self._b = rng.standard_normal((n, n), dtype=np.float32)
            self._c = np.empty((n, n), dtype=np.float32)

    def run(self, step: int) -> float:
        """Spend the step's compute; returns the requested duration (0 for matmul)."""
        if self.mode is ComputeMode.MATMUL:
            t0 = self._clock()
            np.matmul(self._a, self._b, out=self._c)
            factor = self.plan.slowdown(step) if self.plan.slowdown is not None else 1.0
            if factor > 1.0:  # a straggler: its FLOPs take factor times as long (spun, like the rest)
                self._spin((factor - 1.0) * (self._clock() - t0))
            return 0.0
        duration = self.plan.duration_s(step)
        if self.mode is ComputeMode.SLEEP:
            if duration > 0:
                self._sleep(duration)
        else:
            self._spin(duration)
        return duration

    def _spin(self, duration: float) -> None:
        spin(duration, self._clock)
