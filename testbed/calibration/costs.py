"""Per-call costs across gradient sizes, from single-worker runs of the testbed itself.

For every size in ``SIZES_BYTES`` (4 KiB to 32 MiB) and every shard count in ``SHARDS``,
one worker runs a short config through ``testbed.runner.run.run_config`` with sleep
compute (as a worker computes between calls), and the run's own timing events and each
actor's CPU time give the curves of ``CallCosts``: the push and the pull as the worker saw
them, the shard's apply, the step's untimed rest, and each process's CPU. Because they come
from the real actors, a change of the step protocol shows in the curves without new code.

CPU time is per process, not per call, so the split between a push and a pull comes from
two runs at one shard that differ only in how often they pull (every step, and once at
the end): CPU = pushes x per_push + pulls x per_pull, solved for both. At other shard counts
one run per size is split in the one-shard ratio at the same size.

A pull is timed differently when it is a call of its own (every ``ssp`` pull) than when it
travels with the push, so at the largest shard count a third run per size pulls that way
(``plain_pull_step_from_points``).

``run_point`` needs Ray; ``point_from_run`` and ``call_costs_from_points`` are pure.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from testbed.model.curves import PLAIN_PULL_STEP, CallCosts, SizeCurve, pooled_means

__all__ = ["SIZES_BYTES", "SHARDS", "RunPoint", "point_from_run", "split_per_call", "call_costs_from_points",
           "measure_call_costs", "init_call_from_points", "ray_cpu_from_points", "ray_cpu_shard_step_from_points",
           "push_return_from_points", "STEP_PAUSE_S", "BEYOND_SHARDS",
           "small_calls_from_point", "paired_small_calls", "measure_small_calls", "BEYOND_LARGE_BYTES",
           "BEYOND_LARGER_BYTES",
           "disturbed_sizes", "mean_point", "DISTURBED_RATIO", "plain_pull_step_from_points"]

KIB, MIB = 2**10, 2**20
# Calibrated sizes: a factor of 4 to 16 apart, from Ray's inline arguments to object-store
# transfers that outgrow the caches.
SIZES_BYTES = (4 * KIB, 64 * KIB, 512 * KIB, 2 * MIB, 8 * MIB, 32 * MIB)
SHARDS = (1, 2)
# The compute time of the calibration runs: a typical per-step compute time.
STEP_PAUSE_S = 0.02
WARMUP_STEPS = 2  # the first steps map memory and warm caches: left out of the event means


@dataclasses.dataclass(frozen=True)
class RunPoint:
    """What one single-worker calibration run measured (seconds; CPU totals over training)."""
    gradient_bytes: int
    shards: int
    steps: int
    pushes: int
    pulls: int
    push_s: float            # mean push event
    pull_s: float            # mean pull event (0 when the run had none)
    apply_s: float           # mean apply event over the shards
    step_gap_s: float        # per step: train time minus the timed phases
    worker_cpu_s: float      # the worker process's CPU during training
    shard_cpu_s: float       # one shard process's CPU during training (mean over shards)
    init_s: float = 0.0      # the driver's init span (nothing to read: the call alone)
    ray_cpu_s: float = 0.0   # Ray's own processes' CPU during training (raylet, GCS, agents)
    plain_pulls: bool = False  # an ``ssp`` run: every pull a call of its own (``plain_pull_step_from_points``)
    raylet_cpu_s: float = 0.0  # the raylet's part of ``ray_cpu_s`` (the object store's owner; 0: not read)
    fresh: bool = False      # the run started a process of its own (``init_call_from_points``)


def _mean(durations: list[float]) -> float:
    """The plain mean of the events (after the warm-up steps). Not a trimmed mean: the model
    predicts the mean event a run measures, tails included, and the tails are real costs of
    the call. Measured on this 2-core machine, one worker, 20 ms sleep, 38 steps: a 16 MiB pull
    is bimodal (median 3.4 ms, p90 36.6 ms: more than one pull in ten pays ~33 ms more), so a
    10% trimmed mean said 6.6 ms where the mean was 8.8 ms; at 64 KiB and 2 MiB the two agree
    within 2%. A 10% trim made every large-gradient pull 25% short."""
    return float(np.mean(durations)) if durations else 0.0


def point_from_run(gradient_bytes: int, shards: int, steps: int, columns: dict[str, list],
                   train_cpu_s: dict[str, float], ray_cpu_s: float = 0.0, plain_pulls: bool = False,
                   raylet_cpu_s: float = 0.0) -> RunPoint:
    """A ``RunPoint`` from a run's event columns and its actors' training CPU."""
    by: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for role, phase, step, dur in zip(columns["role"], columns["phase"], columns["step"], columns["duration_ns"]):
        by.setdefault((role, phase), []).append((int(step), dur / 1e9))

    def events(role: str, phase: str, warm: bool = True) -> list[float]:
        rows = by.get((role, phase), [])
        kept = [d for s, d in rows if not warm or s >= WARMUP_STEPS]
        return kept or [d for _, d in rows]

    pushes, pulls = len(by.get(("worker", "push"), [])), len(by.get(("worker", "pull"), []))
    push_s, pull_s = _mean(events("worker", "push")), _mean(events("worker", "pull"))
    gap = _step_gap_s(columns)
    shard_cpu = [v for k, v in train_cpu_s.items() if k.startswith("server-")]
    init = [d for s, d in by.get(("driver", "init"), [])]
    return RunPoint(gradient_bytes, shards, steps, pushes, pulls, push_s, pull_s,
                    _mean(events("server", "apply")), gap,
                    float(train_cpu_s.get("worker-0", 0.0)), float(np.mean(shard_cpu)) if shard_cpu else 0.0,
                    float(np.median(init)) if init else 0.0, float(ray_cpu_s), plain_pulls, float(raylet_cpu_s))


# Fewest runs that started a process of their own for the init call to be read from them alone.
FRESH_INIT_RUNS = 3


def init_call_from_points(points: list[RunPoint]) -> float | None:
    """The driver's init call with nothing to read: the median init span of the runs that
    started a process of their own (``RunPoint.fresh``), or of every run when fewer than
    ``FRESH_INIT_RUNS`` did (None when no run recorded one).

    Why the fresh runs: a run of the testbed starts its shard and worker processes, waits for
    them to answer, and calls init right away, while the sweep's runs mostly take processes an
    earlier run started (``ReusedActors``). An init in a session with a process just started
    takes longer: side by side on 2026-12-06 (one worker, one shard, nothing to read, six
    rounds alternated), 0.95 ms with both processes new, 0.90 and 0.96 with either one new, and
    0.75 with both reused; in one sweep, the six runs with a step clock of their own (``ssp``:
    never reused) 1.02 ms at the median, the other eighteen 0.88. Read from every run (the rule
    before), the one-worker inits of the held-out draws 2026120519 to 2026120603 measured 1.15 x
    the calibrated call at the median (26 with nothing to read, 1.14 for 9 parallel inits with
    data), where 2 to 8 processes, read off the fan-out to freshly started probes, measured
    0.98-1.03 x."""
    spans = [p.init_s for p in points if p.init_s > 0]
    fresh = [p.init_s for p in points if p.init_s > 0 and p.fresh]
    if len(fresh) >= FRESH_INIT_RUNS:
        spans = fresh
    return float(np.median(spans)) if spans else None


def ray_cpu_from_points(points: list[RunPoint]) -> SizeCurve | None:
    """Ray's own processes' CPU per worker step against the gradient size, from the one-shard
    runs that pull every step (None when no run measured it: a node other than the driver's)."""
    rows = [(p.gradient_bytes, p.ray_cpu_s / p.steps) for p in points
            if p.shards == 1 and p.pulls >= p.steps and p.ray_cpu_s > 0 and not p.plain_pulls]
    return SizeCurve(tuple(rows)) if len(rows) >= 2 else None


def ray_cpu_shard_step_from_points(points: list[RunPoint]) -> SizeCurve | None:
    """What Ray's own processes spend per worker step for each shard beyond the first, against
    one shard's slice: at each size, the 2-shard run pulling every step against the 1-shard
    one, their Ray CPU per step's difference, never below 0 (None without two such pairs).

    Why: a slice past the inline limit is an object in the node's object store, held by the
    raylet, one per shard a push and one per shard a pull, so the raylet's work grows with the
    shards where the curve over the gradient size (``ray_cpu_from_points``, one shard) does not.
    Measured on 2026-12-04 (one worker, 50 ms sleep, pulling every step, 40 steps): the raylet's
    CPU per step 3.25, 6.25, 9.75 ms at 1, 2, 4 shards for 512 KiB and 3.5, 6.25, 10.75 ms for
    8 MiB. On the held-out draws 2026120415-16 the configs with many workers on 2-4 shards at
    MiB slices measured Ray's CPU per step at 1.6-3.7 x the one-shard curve and came out 29-50 %
    short on train.

    The raylet's own CPU is compared where both runs read it: the other processes' (the agents,
    the GCS) is CPU a second, not a step, and in runs of 28-48 steps it moved the difference by
    +-1.5 ms a step (the same side-by-side runs: 1.25-2.25 ms a step beside the raylet's), enough
    to read 0 at two sizes of six in a calibration of 17:00 on 2026-12-04."""
    by = {(p.gradient_bytes, p.shards): p for p in points
          if p.pulls >= p.steps and p.ray_cpu_s > 0 and p.steps > 0 and not p.plain_pulls}

    def cpu(p: RunPoint, raylet: bool) -> float:
        return (p.raylet_cpu_s if raylet else p.ray_cpu_s) / p.steps
    rows = []
    for (m, k), two in sorted(by.items()):
        one = by.get((m, 1))
        if k == 2 and one is not None:
            raylet = one.raylet_cpu_s > 0 and two.raylet_cpu_s > 0
            rows.append((m / 2, max(0.0, cpu(two, raylet) - cpu(one, raylet))))
    return SizeCurve(tuple(rows)) if len(rows) >= 2 else None


def push_return_from_points(points: list[RunPoint]) -> float | None:
    """How much longer a plain push (a call of its own, timed until its answer is back) lasts
    than the push part of a push that carries the pull (which ends where the shard was done
    with the push): at one shard, the run pulling once against the run pulling every step, at
    each size; the median over the sizes, never below 0 (None without such pairs).

    Why one figure: a plain push answers with an int whatever the gradient, so its extra is
    the answer's way back and the worker's wake, not a per-byte cost; the median over the six
    sizes keeps one noisy pair of runs out. Measured side by side on 2026-12-03 (one worker, one
    shard, 40 steps, two rounds): +0.36, +0.19, +0.64, +0.27, -0.76 ms at 4 KiB-8 MiB in one
    round, +0.59, +0.81, +1.05, +0.47, +0.80 ms in the other (2 shards: +0.39 and +0.54 ms at
    the median)."""
    diffs = []
    points = [p for p in points if not p.plain_pulls]
    for size in sorted({p.gradient_bytes for p in points if p.shards == 1}):
        runs = sorted((p for p in points if p.shards == 1 and p.gradient_bytes == size), key=lambda p: -p.pulls)
        if len(runs) >= 2 and runs[0].pulls >= runs[0].steps and runs[-1].pulls < runs[-1].steps:
            diffs.append(runs[-1].push_s - runs[0].push_s)
    return max(0.0, float(np.median(diffs))) if diffs else None


def plain_pull_step_from_points(points: list[RunPoint]) -> SizeCurve | None:
    """What a pull that is a call of its own (every ``ssp`` pull) adds for each shard beyond the
    first, over the pull part of a push that carries it, against one shard's slice: at each
    size, the plain-pull run against the run pulling every step at the same shard count (made
    right before it), their pull events' difference over (shards - 1), never below 0 (None
    without such pairs).

    Why per shard beyond the first: a pull travelling with the push is timed from where the
    last shard was done with the push, so the other shards' replies came in during the push;
    a pull of its own has every shard's reply in it, and the worker takes them in turn. Measured
    on 2026-12-04, one worker, 20 ms sleep, 4 MiB: ssp pulls of 5.2, 8.6, 11.1, 14.0 ms at 1-4
    shards against 4.5, 5.0, 5.1, 5.9 ms for the async pull part (the simulation said 3.6-4.5 ms
    for both); at 96 KiB and 3 shards 3.2 against 1.3 ms; at one shard the two differ by
    0.2-0.7 ms, which the model's call of its own (the shard's dispatch) already holds. The
    differences are made non-decreasing over the sizes (``pooled_means``)."""
    rows = []
    for plain in (p for p in points if p.plain_pulls and p.shards > 1 and p.pulls > 0):
        pair = [p for p in points if not p.plain_pulls and p.shards == plain.shards
                and p.gradient_bytes == plain.gradient_bytes and p.pulls >= p.steps]
        if pair:
            step = max(0.0, plain.pull_s - pair[0].pull_s) / (plain.shards - 1)
            rows.append((plain.gradient_bytes / plain.shards, step))
    if len(rows) < 2:
        return None
    # A larger reply never costs less to take: the differences made non-decreasing over the
    # sizes (pooled where they fall), as the difference of two noisy means can dip below the
    # sizes around it (on 2026-12-04 03:52 it read 1.93, 1.72, 2.09, 2.67, 0, 7.68 ms).
    rows.sort()
    return SizeCurve(tuple(zip([b for b, _ in rows], pooled_means([v for _, v in rows]))))


def _step_gap_s(columns: dict[str, list]) -> float:
    """Mean time per step that no worker event covers (producing and slicing the gradient,
    the loop itself): from one compute's start to the next, less that step's events; the
    warm-up steps are left out, as in the event means."""
    starts: dict[int, int] = {}
    timed: dict[int, float] = {}
    for role, phase, step, start, dur in zip(columns["role"], columns["phase"], columns["step"],
                                             columns["start_ns"], columns["duration_ns"]):
        if role != "worker" or phase not in ("read", "compute", "push", "pull", "barrier"):
            continue
        timed[int(step)] = timed.get(int(step), 0.0) + dur
        if phase == "compute":
            starts[int(step)] = int(start)
    gaps = [(starts[s + 1] - starts[s] - timed[s]) / 1e9 for s in sorted(starts)
            if s >= WARMUP_STEPS and s + 1 in starts]
    return max(0.0, _mean(gaps))


def split_per_call(a: tuple[int, int, float], b: tuple[int, int, float]) -> tuple[float, float]:
    """(per push, per pull) from two runs' (pushes, pulls, CPU): CPU = pushes p + pulls q.
    When the runs can't separate them (the same pull ratio, as when a pull travels with the
    push), everything is the push's; negative solutions are clipped to 0."""
    (n1, m1, c1), (n2, m2, c2) = a, b
    det = n1 * m2 - n2 * m1
    if abs(det) < 1e-9 * max(1, n1 * m2):
        return (c1 + c2) / max(1, n1 + n2), 0.0
    p, q = (c1 * m2 - c2 * m1) / det, (n1 * c2 - n2 * c1) / det
    if q < 0:
        return (c1 + c2) / (n1 + n2), 0.0
    if p < 0:
        return 0.0, (c1 + c2) / max(1, m1 + m2)
    return p, q


def _curve(rows: list[tuple[float, float]]) -> SizeCurve:
    return SizeCurve(tuple(rows))


def call_costs_from_points(points: list[RunPoint]) -> tuple[CallCosts, ...]:
    """The curves of every calibrated shard count. ``points`` holds, per size, a run pulling
    every step at each shard count and, at one shard, a second run pulling once (runs with
    plain pulls are left out: ``plain_pull_step_from_points`` reads them)."""
    points = [p for p in points if not p.plain_pulls]
    one = {}
    for size in sorted({p.gradient_bytes for p in points if p.shards == 1}):
        runs = sorted((p for p in points if p.shards == 1 and p.gradient_bytes == size), key=lambda p: -p.pulls)
        every, rare = runs[0], runs[-1]
        worker = split_per_call((every.pushes, every.pulls, every.worker_cpu_s), (rare.pushes, rare.pulls, rare.worker_cpu_s))
        shard = split_per_call((every.pushes, every.pulls, every.shard_cpu_s), (rare.pushes, rare.pulls, rare.shard_cpu_s))
        one[size] = (every, worker, shard)
    out = []
    for shards in sorted({p.shards for p in points}):
        rows = []
        for size in sorted({p.gradient_bytes for p in points if p.shards == shards}):
            if shards == 1:
                run, worker, shard = one[size]
            else:
                run = max((p for p in points if p.shards == shards and p.gradient_bytes == size), key=lambda p: p.pulls)
                # Split each process's CPU in the one-shard ratio at this size (its slice for a shard).
                _, w1, _ = one[size]
                s1 = _at_ratio(one, size / shards)
                worker = _split_like(run.worker_cpu_s, run.pushes, run.pulls, w1)
                shard = _split_like(run.shard_cpu_s, run.pushes, run.pulls, s1)
            rows.append((size, run, worker, shard))
        part = lambda size: size / shards  # noqa: E731 - a shard's figures are read at its slice
        out.append(CallCosts(
            shards=shards,
            worker_push_s=_curve([(s, r.push_s) for s, r, _, _ in rows]),
            worker_pull_s=_curve([(s, r.pull_s) for s, r, _, _ in rows]),
            worker_push_cpu_s=_curve([(s, w[0]) for s, _, w, _ in rows]),
            worker_pull_cpu_s=_curve([(s, w[1]) for s, _, w, _ in rows]),
            shard_push_cpu_s=_curve([(part(s), h[0]) for s, _, _, h in rows]),
            shard_pull_cpu_s=_curve([(part(s), h[1]) for s, _, _, h in rows]),
            apply_s=_curve([(part(s), r.apply_s) for s, r, _, _ in rows]),
            step_gap_s=_curve([(s, r.step_gap_s) for s, r, _, _ in rows])))
    return tuple(out)


def _at_ratio(one: dict[int, Any], slice_bytes: float) -> tuple[float, float]:
    """The one-shard shard split (per push, per pull) at ``slice_bytes``, on its curve."""
    sizes = sorted(one)
    push = SizeCurve(tuple((s, one[s][2][0]) for s in sizes)).at(slice_bytes)
    pull = SizeCurve(tuple((s, one[s][2][1]) for s in sizes)).at(slice_bytes)
    return push, pull


def _split_like(cpu_s: float, pushes: int, pulls: int, ratio: tuple[float, float]) -> tuple[float, float]:
    """Split ``cpu_s`` over the calls so that per_push : per_pull is ``ratio``'s."""
    p, q = ratio
    weight = pushes * p + pulls * q
    if weight <= 0:
        return cpu_s / max(1, pushes), 0.0
    scale = cpu_s / weight
    return p * scale, q * scale


def _steps(nbytes: int, quick: bool) -> int:
    # Enough events that a tail paid by one call in ten shows in the mean (``_mean``): about 45
    # after the warm-up at the small sizes; the large ones spread less from run to run.
    steps = 48 if nbytes <= 512 * KIB else (32 if nbytes <= 8 * MIB else 28)
    return max(8, steps // 4) if quick else steps


def run_point(nbytes: int, shards: int, pull_every: int | None, steps: int, reuse: Any = None,
              plain_pulls: bool = False) -> RunPoint:
    """One single-worker run of the testbed (needs Ray); ``pull_every`` None: pull once, at the
    end; ``reuse``: a ``testbed.runner.run.ReusedActors`` to take the processes from;
    ``plain_pulls``: under ``ssp`` (its clock never holds one worker back), so that every pull
    is a call of its own instead of travelling with the push."""
    from testbed.config.spec import expand, parse_spec
    from testbed.runner.run import run_config

    spec = {"name": "calibrate", "gradient_bytes": nbytes, "servers": shards,
            "pull_every": pull_every or steps, "workload": {"steps": steps},
            "compute": {"mode": "sleep", "seconds": STEP_PAUSE_S}}
    if plain_pulls:
        spec.update(sync="ssp", staleness=steps)
    cfg = expand(parse_spec(spec))[0]
    made = reuse.made if reuse is not None else 0
    outcome = run_config(cfg, 0, "calibrate", reuse=reuse)
    point = point_from_run(nbytes, shards, steps, outcome.columns, outcome.train_cpu_s,
                           sum(outcome.ray_background_cpu_s.values()), plain_pulls,
                           outcome.ray_background_cpu_s.get("raylet", 0.0))
    # A run started a process when nothing was reused, when the reused set lacked one of its
    # actors, or for its step clock (``ssp``: never reused).
    fresh = reuse is None or reuse.made > made or plain_pulls
    return dataclasses.replace(point, fresh=fresh)


def measure_call_costs(quick: bool, progress: Callable[[str], None],
                       reuse: Any = None) -> tuple[tuple[CallCosts, ...], list[RunPoint]]:
    """Run the sweep on the Ray this process is connected to; returns the curves and the runs.
    ``reuse``: a ``testbed.runner.run.ReusedActors`` the runs take their processes from (the
    calibration's; None: every run starts its own)."""
    def runs_at(nbytes: int) -> list[RunPoint]:
        steps = _steps(nbytes, quick)
        runs = [run_point(nbytes, shards, 1, steps, reuse) for shards in SHARDS]
        # Right after the run at the most shards (a pair made back to back shares its level):
        # the same run with every pull a call of its own.
        runs.append(run_point(nbytes, SHARDS[-1], 1, max(8, steps // 3), reuse, plain_pulls=True))
        return runs + [run_point(nbytes, 1, None, steps, reuse)]

    points = []
    for nbytes in SIZES_BYTES:
        progress(f"per-call costs at {nbytes // KIB} KiB")
        points += runs_at(nbytes)
    for nbytes in disturbed_sizes(points)[:MAX_REMEASURED]:
        progress(f"per-call costs at {nbytes // KIB} KiB again (its calls took longer than at the next size: "
                 f"the machine was busy meanwhile)")
        first = [p for p in points if p.gradient_bytes == nbytes]
        kept = [p for p in points if p.gradient_bytes != nbytes]
        again = runs_at(nbytes)  # the same four runs, in the same order as ``first``
        if nbytes in disturbed_sizes(kept + again):
            again = [mean_point(a, b) for a, b in zip(first, again)]
        points = kept + again
    points.sort(key=lambda p: p.gradient_bytes)
    return call_costs_from_points(points), points


# A larger transfer never costs less: a size whose push or pull event took more than this many
# times the next size's was disturbed (a burst of other work on the machine; once in the nine
# calibrations of 2026-12-01/02 on this VM: every call at 512 KiB 1.5-2x the 2 MiB ones), and
# its runs are made again, at most for MAX_REMEASURED sizes (~5 s each).
DISTURBED_RATIO = 1.25
MAX_REMEASURED = 2


def disturbed_sizes(points: list[RunPoint]) -> list[int]:
    """Sizes whose push or pull (the runs pulling every step, at any shard count) exceeds the
    next larger size's by more than ``DISTURBED_RATIO``, the worst first (pure)."""
    worst: dict[int, float] = {}
    for shards in {p.shards for p in points}:
        runs = sorted((p for p in points if p.shards == shards and p.pulls >= p.steps and not p.plain_pulls),
                      key=lambda p: p.gradient_bytes)
        for a, b in zip(runs, runs[1:]):
            for x, y in ((a.push_s, b.push_s), (a.pull_s, b.pull_s)):
                if y > 0 and x > DISTURBED_RATIO * y:
                    worst[a.gradient_bytes] = max(worst.get(a.gradient_bytes, 0.0), x / y)
    return sorted(worst, key=lambda n: -worst[n])


def mean_point(a: RunPoint, b: RunPoint) -> RunPoint:
    """Two runs of one kind, their figures averaged (pure)."""
    if (a.gradient_bytes, a.shards, a.pulls > 1, a.plain_pulls) != (b.gradient_bytes, b.shards, b.pulls > 1, b.plain_pulls):
        raise ValueError("only runs of one size, shard count and pull schedule are averaged")
    fields = {f.name: (getattr(a, f.name) + getattr(b, f.name)) / 2 for f in dataclasses.fields(RunPoint)
              if isinstance(getattr(a, f.name), float)}
    # The init span is averaged too: fresh only when both runs started a process of their own.
    return dataclasses.replace(a, fresh=a.fresh and b.fresh, **fields)


# A shard count beyond the curves', run at the smallest size only: the step a call more per
# shard adds to the worker's figures (terms._worker_side).
BEYOND_SHARDS = 4


def small_calls_from_point(point: RunPoint, one_shard: CallCosts) -> dict[str, float]:
    """The worker's figures of ``point`` (a run at the smallest size pulling every step): its
    push and pull events, and its CPU split over them in the one-shard ratio at that size."""
    size = point.gradient_bytes
    ratio = (one_shard.worker_push_cpu_s.at(size), one_shard.worker_pull_cpu_s.at(size))
    push_cpu, pull_cpu = _split_like(point.worker_cpu_s, point.pushes, point.pulls, ratio)
    return {"worker_push_s": point.push_s, "worker_pull_s": point.pull_s,
            "worker_push_cpu_s": push_cpu, "worker_pull_cpu_s": pull_cpu}


def paired_small_calls(beyond: RunPoint, near: RunPoint, one_shard: CallCosts, curves: CallCosts) -> dict[str, float]:
    """The worker's figures at ``beyond``'s shard count, as the model reads them: ``curves``' (the
    largest calibrated count's) figures at the size plus the step ``beyond`` measured over
    ``near``, a run at the curves' count made right before it (never below 0).

    Why the pair: a run's per-call level moves between runs within one calibration. On
    2026-12-03 08:15 the sweep read 4 KiB pushes at 0.98 ms (1 shard) and 1.68 ms (2 shards)
    where every other session that hour read 1.7-2.3 ms, and the 4-shard run after it 3.71 ms:
    a step of 1.0 ms a shard from a difference of two levels (a paired 2-shard run reads 0.1-0.3),
    which the session's level (x2.05) then doubled; fix_sharded_ps's 4-shard pushes came out
    +86 % at one worker and +245 % at 16. Two runs made back to back share their level."""
    size = beyond.gradient_bytes
    far, here = small_calls_from_point(beyond, one_shard), small_calls_from_point(near, one_shard)
    return {name: max(0.0, getattr(curves, name).at(size) + far[name] - here[name]) for name in far}


# A gradient whose slices at BEYOND_SHARDS shards go through the object store (512 KiB each):
# the second pair of runs beyond the curves' shard counts.
BEYOND_LARGE_BYTES = 2 * MIB
# And a third at 16 MiB (4 MiB slices): the step a shard more adds past the inline limit grows
# with the slice (side by side on 2026-12-04: 2.8 ms a shard at 2 MiB, 3.5-4.1 at 16 MiB,
# 3.6-4.3 at 32 MiB; held-out pushes of one worker to 4 shards at 16-29 MiB came out 19-45 %
# short with the 2 MiB step alone).
BEYOND_LARGER_BYTES = 16 * MIB


def measure_small_calls(costs: tuple[CallCosts, ...], quick: bool, progress: Callable[[str], None],
                        reuse: Any = None, size: int = SIZES_BYTES[0]) -> dict[int, dict[str, float]]:
    """One run at BEYOND_SHARDS shards at ``size`` (the smallest, ``BEYOND_LARGE_BYTES`` or
    ``BEYOND_LARGER_BYTES``), right after one at the largest calibrated count (about 4 s):
    ``paired_small_calls``."""
    curves = max(costs, key=lambda c: c.shards)
    progress(f"per-call costs at {size // KIB} KiB with {curves.shards} and {BEYOND_SHARDS} shards")
    near = run_point(size, curves.shards, 1, _steps(size, quick), reuse)
    beyond = run_point(size, BEYOND_SHARDS, 1, _steps(size, quick), reuse)
    figures = paired_small_calls(beyond, near, costs[0], curves)
    if size == SIZES_BYTES[0]:
        # Right after it, the same run with every pull a call of its own, as the sweep makes at
        # the curves' count: the plain pull's step at BEYOND_SHARDS (``plain_pull_step_beyond``).
        plain = run_point(size, BEYOND_SHARDS, 1, max(8, _steps(size, quick) // 3), reuse, plain_pulls=True)
        figures[PLAIN_PULL_STEP] = plain_pull_step_beyond(plain, beyond)
    return {BEYOND_SHARDS: figures}


def plain_pull_step_beyond(plain: RunPoint, travelling: RunPoint) -> float:
    """What a pull of its own adds per shard beyond the first at ``plain``'s shard count, over
    the pull travelling with a push in ``travelling`` (the run at the same count and size made
    right before it): their pull events' difference over (shards - 1), never below 0.

    Why measured at a second count: the model read an ssp pull at S shards as the travelling
    pull plus (S - 1) times the step measured at 2 shards, and the step a shard adds shrinks as
    the shards grow. Side by side on 2026-12-07 (one worker, 4 KiB and 256 KiB, 20 ms of
    compute, sleeping and spinning, two rounds) the ssp pull over the async one was 1.30-1.84
    ms at 2 shards and 2.68-3.57 at 4 (about 2.1 x, where 3 x was read); on 2026-12-04 at 4 MiB
    3.6, 6.0 and 8.1 ms over the 1-shard difference at 2, 3 and 4 shards (per shard beyond the
    first 3.6, 3.0, 2.7: the same shape at a large size)."""
    return max(0.0, plain.pull_s - travelling.pull_s) / max(1, plain.shards - 1)
