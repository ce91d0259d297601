"""Step-read calibration: direct reads after a pause, as a worker reads its step input.

The disk's bandwidth and IOPS (``testbed.calibration.disk``) are measured back to back, the
way init reads; a worker's step read comes after the rest of its step, and on a virtual disk
a read after an idle pause costs several times one in a tight loop (docs/model.md, "Step
reads"). So one actor (``actors.readprobe.ReadProbe``, the workers' own ``StepReader``)
writes a file in the data directory and measures, sequentially and at random:

- the read back to back, at each size of ``SIZES_BYTES`` (a stream of ``HOT_REPEATS``);
- a random minibatch of ``BATCH_SAMPLES`` samples of ``PAUSED_BYTES`` back to back, beside the
  stream of single samples of that size: a step read of one sample holds the reader's own
  work once (drawing the positions, building the plan), and the later samples of a minibatch
  don't pay it again, so the minibatch's extra samples say what a sample costs alone and the
  rest of a single-sample read is that work (``step_overhead``);
- the read of ``PAUSED_BYTES`` after a sleep of each pause of ``PAUSES_S`` (``ROUNDS``
  reads, in runs of steady pauses as a worker's steps come: see ``ReadProbe.sweep_s``).

A read after a pause cost its back-to-back time plus a wake-up that depends on the pause
and hardly on the size (on a quiet 2-core VM, sequential: +27, +45, +92 us at 5, 20, 100 ms
for 4 KiB, +29, +59, +95 us for 1 MiB). So each pause's curve is the back-to-back curve
shifted by the wake-up measured at the small size: the pauses, where the time goes, get
every round of the budget, and the sizes cost almost nothing.

Means, not trimmed means or medians: the model predicts a read's mean, and a read after a
pause has a long tail (a read preempted for a few ms is part of what a worker's read costs on
a shared machine). The mean of 30 such reads is noisy, so the wake-ups are then made
non-decreasing in the pause (``monotone_in_pause``), and the back-to-back means
non-decreasing in the size (``monotone_in_size``: 40 reads of 4 KiB and of 64 KiB cost about
the same, and a tail read among the first once made the larger the faster, so a step's read of
32 KiB came out below one of 4 KiB). ``step_reads_from_sweep`` is pure;
``measure_step_reads`` needs Ray.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

from testbed.model.curves import pooled_means
from testbed.model.reads import READ_ORDERS, StepReadCosts, paused_curves

__all__ = ["SIZES_BYTES", "PAUSED_BYTES", "PAUSES_S", "QUICK_PAUSES_S", "FILE_BYTES", "BATCH_SAMPLES", "sweep_cells",
           "step_overhead", "step_reads_from_sweep", "monotone_in_pause", "monotone_in_size", "measure_step_reads"]

KIB, MIB = 2**10, 2**20
# A 4 KiB sample, a small minibatch and a reader's block (16 times apart): a step's read lies
# between them, and beyond them grows along the end segment (a block at a time).
SIZES_BYTES = (4 * KIB, 64 * KIB, 1 * MIB)
PAUSED_BYTES = 4 * KIB
# Pauses up to the longest compute of the validation space (beyond it the curve stays flat).
PAUSES_S = (0.005, 0.02, 0.1)
QUICK_PAUSES_S = (0.02,)
FILE_BYTES = 64 * MIB
# 40 reads a cell once: their means of 4 KiB random reads spanned 71-116 us within one minute,
# and a random step read multiplies that mean by its minibatch less one. 200 reads cost ~0.2 s.
HOT_REPEATS = 200
BATCH_SAMPLES = 8
ROUNDS, QUICK_ROUNDS = 20, 6  # 20 reads after each of 2 x 125 ms of pauses, and warm-ups: 6 s


def sweep_cells(pauses_s: Sequence[float] = PAUSES_S) -> tuple[list[tuple], list[tuple[str, int, float]]]:
    """The back-to-back cells ((order, bytes), and the random minibatch (order, bytes,
    samples)) and the paused cells (order, bytes, pause)."""
    hot: list[tuple] = [(order, n) for order in READ_ORDERS for n in SIZES_BYTES]
    hot.append(("random", PAUSED_BYTES, BATCH_SAMPLES))
    paused = [(order, PAUSED_BYTES, p) for order in READ_ORDERS for p in pauses_s]
    return hot, paused


def step_overhead(single_s: Sequence[float], batch_s: Sequence[float], samples: int) -> float:
    """The reader's own work once per step read, from back-to-back step reads of one sample
    (``single_s``) and of ``samples`` samples (``batch_s``) of the same size and order: a
    sample alone costs the batch's extra over the single read, per extra sample, and the
    single read's rest is the step's own work. Never below 0 or above the single read."""
    if samples < 2 or not single_s or not batch_s:
        return 0.0
    single, batch = _mean(single_s), _mean(batch_s)
    alone = max(0.0, (batch - single) / (samples - 1))
    return min(single, max(0.0, single - alone))


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def monotone_in_pause(points: Sequence[tuple[float, float, int]]) -> list[float]:
    """Wake-ups ``(pause, seconds, reads)`` made non-decreasing in the pause by pooling adjacent
    violators (weighted by their reads): a longer pause never found the disk more awake in the
    steady runs measured (docs/model.md), so a mean that says otherwise has a tail read too
    many (one read of 2.6 ms among 30 adds 80 us to their mean), and its neighbours share it.
    Returns the seconds in pause order."""
    ordered = sorted(points)
    return pooled_means([seconds for _, seconds, _ in ordered], [reads for _, _, reads in ordered])


def monotone_in_size(means: dict[tuple[str, int], tuple[float, int]]) -> dict[tuple[str, int], float]:
    """Back-to-back means ``{(order, bytes): (seconds, reads)}`` made non-decreasing in the size,
    per order, by pooling adjacent violators (weighted by their reads): a larger contiguous read
    never costs less than a smaller one of the same order, so a mean that says otherwise holds a
    tail read, and its neighbours share it. Returns ``{(order, bytes): seconds}``."""
    out: dict[tuple[str, int], float] = {}
    for order in sorted({o for o, _ in means}):
        keys = sorted(k for k in means if k[0] == order)
        pooled = pooled_means([means[k][0] for k in keys], [means[k][1] for k in keys])
        out.update(zip(keys, pooled))
    return out


def step_reads_from_sweep(hot_cells: Sequence[tuple], hot_s: Sequence[Sequence[float]],
                          paused_cells: Sequence[tuple[str, int, float]], paused_s: Sequence[Sequence[float]], *,
                          block_bytes: int, directory: str, pause_kind: str = "sleep",
                          source: str = "testbed-reader in an actor") -> StepReadCosts:
    """The paused-read curves from the sweep's seconds (see the module doc): per order, the
    back-to-back means (pause 0) and, per pause, those means plus the wake-up measured at the
    paused size (its paused mean less its back-to-back mean, never below 0, and never smaller
    after a longer pause: ``monotone_in_pause``); the back-to-back means never smaller at a
    larger size (``monotone_in_size``); and the reader's own work per step read from the
    random minibatch's cell beside its single samples' (``step_overhead``)."""
    single = {(c[0], c[1]): xs for c, xs in zip(hot_cells, hot_s) if (len(c) < 3 or c[2] == 1)}
    batches = [(c, xs) for c, xs in zip(hot_cells, hot_s) if len(c) > 2 and c[2] > 1]
    overhead = 0.0
    for (order, n, samples), xs in batches:
        overhead = step_overhead(single.get((order, n), ()), xs, samples)
    hot = monotone_in_size({key: (_mean(xs), len(xs)) for key, xs in single.items() if xs})
    rows = [(order, 0.0, n, t) for (order, n), t in hot.items()]
    for order in READ_ORDERS:
        wakes = [(pause, max(0.0, _mean(xs) - hot[o, n]), len(xs))
                 for (o, n, pause), xs in zip(paused_cells, paused_s) if o == order and xs and (o, n) in hot]
        for (pause, _, _), wake in zip(sorted(wakes), monotone_in_pause(wakes)):
            rows += [(o, pause, size, t + wake) for (o, size), t in hot.items() if o == order]
    return StepReadCosts(paused_curves(rows), block_bytes=block_bytes, pause_kind=pause_kind,
                         directory=directory, source=source, step_overhead_s=overhead)


def measure_step_reads(directory: str, *, quick: bool = False, block_bytes: int = MIB, cache_bypass: bool = True,
                       progress: Callable[[str], None] = lambda s: None) -> StepReadCosts:
    """Run the sweep in an actor on the Ray this process is connected to (about 7 s; 2 s quick)."""
    import ray

    from actors.readprobe import ReadProbe

    hot_cells, paused_cells = sweep_cells(QUICK_PAUSES_S if quick else PAUSES_S)
    progress("step reads after pauses")
    probe = ray.remote(ReadProbe).options(num_cpus=0).remote()
    try:
        hot_s, paused_s, mode = ray.get(probe.sweep_s.remote(os.path.expanduser(directory), FILE_BYTES, hot_cells,
                                                       paused_cells, HOT_REPEATS, QUICK_ROUNDS if quick else ROUNDS,
                                                       block_bytes, cache_bypass))
    finally:
        ray.kill(probe)
    return step_reads_from_sweep(hot_cells, hot_s, paused_cells, paused_s, block_bytes=block_bytes,
                                 directory=str(directory), source=f"testbed-reader in an actor ({mode})")
