"""Calibrating the scheduler under load (``testbed.model.scheduler``): the probe runs in an
actor (``actors.schedprobe``) on a node of the Ray this process is connected to, with 0 to 16
spinning processes per core beside it; each curve is made non-decreasing (``monotone``)."""

from __future__ import annotations

from typing import Callable

from testbed.model.scheduler import SchedulerCosts, monotone

__all__ = ["measure_scheduler", "reply_wake_from_calls", "LOADS", "QUICK_LOADS", "SPIN_S"]

LOADS = (0, 1, 2, 4, 8, 16)           # CPU-bound processes besides the probe, per core
QUICK_LOADS = (0, 2, 8)
# Samples a load: 20, each a spin and 8 woken calls. At 2-4 spinners a core a sample's mean wake
# is either ~0.07 ms (woken at once) or 0.4-4 ms (a slice or more), so 10 samples read the wake
# at 4 spinners a core anywhere in 0.18-2.34 ms over nine calibrations of 2026-12-05/06 (20 by
# hand: 1.17-1.60); the hours whose curve read it lowest left the spinning workers' reads
# shortest. 20 samples take ~2.7 s more (6.2 s in all on 2 cores).
SAMPLES, QUICK_SAMPLES = 20, 4
SPIN_S = 0.02


def measure_scheduler(cores: int, *, quick: bool = False,
                      progress: Callable[[str], None] = lambda s: None) -> SchedulerCosts:
    """About 6 s on 2 cores (1.5 s quick)."""
    import ray

    from actors.schedprobe import SchedulerProbe

    progress("the scheduler under load (spinning processes per core: "
             f"{', '.join(str(x) for x in (QUICK_LOADS if quick else LOADS))})")
    probe = ray.remote(SchedulerProbe).options(num_cpus=0).remote()
    try:
        raw = ray.get(probe.samples.remote(QUICK_LOADS if quick else LOADS, cores,
                                           QUICK_SAMPLES if quick else SAMPLES, SPIN_S))
    finally:
        ray.kill(probe)
    return SchedulerCosts(spin_overshoot_s=monotone(raw["spin_overshoot_s"]), wake_s=monotone(raw["wake_s"]),
                          wake_first_s=monotone(raw.get("wake_first_s", ())),
                          cores=cores, spin_s=SPIN_S, samples=QUICK_SAMPLES if quick else SAMPLES,
                          sleep_overshoot_s=float(raw.get("sleep_overshoot_s", 0.0)))


def reply_wake_from_calls(held_s: dict[float, list[float]]) -> tuple[tuple[float, float], ...]:
    """``{hold: [seconds beyond the hold, ...]}`` (``Probe.held_calls_s``) as the points of
    ``SchedulerCosts.reply_wake_s``: per hold, the median call beyond its hold less the median
    of the calls answered at once (hold 0), non-decreasing in the hold (``monotone``: a longer
    wait never found the caller more awake; a dip is noise). Empty without the hold 0."""
    import statistics
    base = held_s.get(0.0)
    if not base:
        return ()
    rest = statistics.median(base)
    return monotone([(hold, statistics.median(xs) - rest) for hold, xs in held_s.items() if xs])
