"""The per-call cost level of this Ray session, checked against the profile's curves.

A Ray call's CPU cost on the 2-core VM this testbed was built on moves between Ray sessions
by more than any other figure the model uses, while within one session it holds: the same
single-worker run (4 KiB, one shard, pull every step, 40 steps) measured its push at 1.29, 1.10
and 1.32 ms in one session and 2.0, 2.2 and 1.8 ms in the session before it, minutes apart on
an idle machine (2026-12-01, 19:55-20:05); the worker's CPU per step moved with it (the cost
is CPU, not waiting), and a pure-Python loop timed beside it did not (it is not the VM's CPU
speed). A calibration made in one session and runs made in another then share one draw of
that level, so every prediction of a draw erred the same way: the held-out draw 2026120119
had every per-step phase biased low (push -27 %, pull -33 %), the calibration of 19:00 reading
4 KiB pushes at 1.12 ms where the one of 18:00 read 1.68.

``testbed validate`` therefore re-measures a few of the calibration's own points (one worker,
one shard, pulling every step, at ``CHECK_SIZES``, ``CHECK_REPEATS`` rounds over them) in the
session that runs the configs, before the first one, measures each figure's ratio to the
calibrated curves at each size (the rounds' median: ``median_ratios``), and scales
every per-call curve by the median of those ratios at each size where those medians run one
way over the sizes, by one level (the median of them all) where they do not (``size_levels``
and ``session_level`` say why, and why not each figure's own, nor a line over the sizes): the
shape over sizes and shard counts stays the calibration's, the level is the session's. The
check, its ratios and the levels are kept with the profile (``HardwareProfile.call_level``);
``apply_call_level`` still takes ratios per figure and size (read between the sizes linearly in
log bytes, flat past the ends).

The same check, one round, runs again after the last config (``with_level_after``): the level
the machine stood at when the runs ended. It says how far the machine moved while the configs
ran (the held-out draw 2026120721 was calibrated in a slow spell its first two check rounds
still read, x1.6-3.0 on push and pull, while the third read x0.5-1.2 and the runs came out
faster than predicted on every phase), and, with the check before them, it brackets the level
the runs met: ``at_span_level`` predicts them at the geometric mean of the two checks, size by
size (the span's level; after 2026120801, docs/model.md "The level of the runs' span").

``measure_call_level`` needs Ray; the rest is pure.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import statistics
from typing import Callable, Optional

from testbed.calibration.costs import RunPoint, run_point
from testbed.model.curves import CallCosts
from testbed.model.level import FIGURES, ratio_at, scale_call_curves
from testbed.model.profile import HardwareProfile

__all__ = ["CHECK_SIZES", "CHECK_STEPS", "CHECK_REPEATS", "FIGURES", "level_from_points", "median_ratios",
           "apply_call_level", "measure_call_level", "with_level_after", "level_drift", "AFTER_KEYS",
           "at_span_level", "span_levels",
           "ratio_at", "session_level", "size_levels"]

KIB, MIB = 2**10, 2**20
# Inline (Ray passes the bytes in the call's message), past the inline limit, and large.
CHECK_SIZES = (4 * KIB, 512 * KIB, 8 * MIB)
CHECK_STEPS = 40
# Rounds over the sizes (each a run per size); each figure's ratio at a size is the median over
# the rounds (``median_ratios``). Why three, not one: one run per size moves by itself. Nine
# checks in three sessions of one profile (2026-12-05 22:28, three back to back in each) read
# 0.96-1.27 at 8 MiB and 0.79-1.14 at 512 KiB, up to 0.2 apart within one session; the check of
# the held-out draw 2026120522 read x1.15 / 1.02 / 0.83 against that same profile, and its runs
# went the other way at both ends (small calls of many workers +50-86 % on push, 15-30 MiB
# gradients -16..-26 % on train). About 14 s more a validate.
CHECK_REPEATS = 3
# A check whose ratio falls outside these bounds is taken as the bound: a session can't make
# a call 3x cheaper or dearer than calibration measured; a ratio beyond that is a broken run.
RATIO_BOUNDS = (1 / 3, 3.0)

def _ratio(measured: float, calibrated: float) -> float:
    if not (calibrated > 0 and measured >= 0 and math.isfinite(measured)):
        return 1.0
    lo, hi = RATIO_BOUNDS
    return min(hi, max(lo, measured / calibrated))


def level_from_points(points: list[RunPoint], one_shard: CallCosts) -> dict[str, list[list[float]]]:
    """Per figure, ``[bytes, measured / calibrated]`` at each checked size: the points' push and
    pull events, their processes' CPU per step (against the curves' CPU per push and per pull
    times the calls made), their applies and their step gaps."""
    out: dict[str, list[list[float]]] = {name: [] for name in FIGURES}
    for p in sorted(points, key=lambda p: p.gradient_bytes):
        b = float(p.gradient_bytes)
        c = one_shard
        worker = p.pushes * c.worker_push_cpu_s.at(b) + p.pulls * c.worker_pull_cpu_s.at(b)
        shard = p.pushes * c.shard_push_cpu_s.at(b) + p.pulls * c.shard_pull_cpu_s.at(b)
        out["push"].append([b, _ratio(p.push_s, c.worker_push_s.at(b))])
        out["pull"].append([b, _ratio(p.pull_s, c.worker_pull_s.at(b)) if p.pulls else 1.0])
        out["worker_cpu"].append([b, _ratio(p.worker_cpu_s, worker)])
        out["shard_cpu"].append([b, _ratio(p.shard_cpu_s, shard)])
        out["apply"].append([b, _ratio(p.apply_s, c.apply_s.at(b))])
        out["step_gap"].append([b, _ratio(p.step_gap_s, c.step_gap_s.at(b))])
    return out


def median_ratios(rounds: list[dict[str, list[list[float]]]]) -> dict[str, list[list[float]]]:
    """Per figure, ``[bytes, ratio]`` at each size: the median of the rounds' ratios there
    (each round as ``level_from_points`` gives it; one round is returned as it is)."""
    if not rounds:
        return {}
    out: dict[str, list[list[float]]] = {}
    for figure, rows in rounds[0].items():
        out[figure] = [[b, float(statistics.median(r[figure][i][1] for r in rounds))] for i, (b, _) in enumerate(rows)]
    return out


def session_level(ratios: dict[str, list[list[float]]]) -> float:
    """The one level every per-call curve is scaled by: the median of all the check's ratios
    (every figure at every checked size).

    Why one figure, not each figure's ratio at each size: one 40-step run per size is noisy,
    and scaling each curve by its own ratios carried that noise into every prediction. Over the
    five folders first made with per-size ratios (draws 2026120120 and 2026120121 and the three
    reproduction runs of 21:12; seen data, the choice judged on the draw after), train's median
    |error| was 4.7, 8.4, 3.6, 3.6, 6.4 % with per-size ratios, 5.2, 7.9, 3.4, 3.2, 4.6 % with one
    ratio per figure, 4.1, 6.1, 3.2, 3.3, 2.4 % with the one median (and 6.1, 5.2, 3.3, 2.3, 3.9 %
    at the calibration's level): a check whose 512 KiB push read x2.03 while its 4 KiB and 8 MiB
    ones read x1.50 and x1.36 put 4 shards at 16 workers at 117 steps/s where they ran 195.

    And not a line through the ratios against log bytes (tried 2026-12-03, after draw 20261203
    read x0.66-0.77 at 4 KiB and x0.97-1.24 at 8 MiB): held out, it gave train p90 22.3 % where
    the median says 24.2 % on 2026120308, and 33.9 % where the median says 21.1 % on 2026120309,
    whose calibration had read the small calls at half the session's level (x2.0 at 4 KiB,
    x1.2-1.4 at 8 MiB): the line carried that into every small call, and 16-29 sleeping workers
    on 4 shards came out +49-51 % on train (docs/draws.md)."""
    values = [r for rows in ratios.values() for _, r in rows]
    return float(statistics.median(values)) if values else 1.0


def size_levels(ratios: dict[str, list[list[float]]]) -> list[list[float]]:
    """``[bytes, level]`` at each checked size: the median of every figure's ratio at that size
    when those medians run one way over the sizes (never falling, or never rising), else the one
    level (``session_level``) at every size.

    Why: what moves between sessions is partly a per-call overhead and partly a per-byte cost
    (the 2026-12-01 sessions above: x0.63 at 4 KiB, x0.77 at 128 KiB, x0.90 at 2 MiB), so a
    session's true ratio runs one way from the small calls' to the large ones'. Medians that
    rise and fall again over three sizes cannot be that: one size's run was disturbed, and the
    one level keeps its noise out (the failure that put per-size ratios aside: a check reading
    x2.03 at 512 KiB between x1.50 and x1.36). Pooled over the six figures, one figure's noise
    stays out too. Re-predicting the thirteen held-out draws of 2026-12-03 (seen; judged on the
    draw after): train p90 28.3 -> 25.4 % on the mean over the draws (median |error| 9.1 -> 8.6
    %), the most where the check's sizes parted widest (2026120320: x0.54 / 0.80 / 1.50, train
    p90 38.4 -> 17.3 %; 2026120315: x0.80 / 1.19 / 1.60, 28.6 -> 16.6 %), worse on 2026120309
    (x1.97 / 1.32 / 1.31: p90 25.5 -> 30.1 %) and 2026120313; the apply's median 20.5 -> 22.2 %."""
    one = session_level(ratios)
    sizes = sorted({b for rows in ratios.values() for b, _ in rows})
    pooled = [statistics.median([r for rows in ratios.values() for b, r in rows if b == size]) for size in sizes]
    pairs = list(zip(pooled, pooled[1:]))
    one_way = all(a <= b for a, b in pairs) or all(a >= b for a, b in pairs)
    return [[float(size), float(v if one_way else one)] for size, v in zip(sizes, pooled)]


def apply_call_level(profile: HardwareProfile, ratios: dict[str, list[list[float]]],
                     record: Optional[dict] = None) -> HardwareProfile:
    """``profile`` with every per-call curve (each shard count's, and the figures beyond them)
    scaled by its figure's ratio at each point's size (``testbed.model.level.scale_call_curves``);
    ``record`` is kept as ``call_level``."""
    def factor(figure: str, nbytes: float) -> float:
        return ratio_at(ratios[figure], nbytes) if figure in ratios else 1.0
    return dataclasses.replace(scale_call_curves(profile, factor),
                               call_level=record if record is not None else {"ratios": ratios})


# What the check after the runs keeps of its record (its runs and rounds are the check's own detail).
AFTER_KEYS = ("measured", "sizes", "steps", "repeats", "ratios", "level", "levels", "failed")


def with_level_after(profile: HardwareProfile, after: dict) -> HardwareProfile:
    """``profile`` with ``after`` (the ``call_level`` record of a check made after the runs, or a
    failed one) kept as its ``call_level["after"]``; the curves stay as they are (``at_span_level``
    then puts them at the span's level)."""
    record = dict(profile.call_level or {})
    record["after"] = {k: v for k, v in after.items() if k in AFTER_KEYS}
    return dataclasses.replace(profile, call_level=record)


def span_levels(before: list[list[float]], after: list[list[float]]) -> list[list[float]]:
    """``[bytes, level]`` at each size either check measured: the geometric mean of the level
    before the runs and the one after them there (each read between its sizes as ``ratio_at``)."""
    sizes = sorted({float(b) for b, _ in before} | {float(b) for b, _ in after})
    return [[b, math.sqrt(ratio_at(before, b) * ratio_at(after, b))] for b in sizes]


def at_span_level(profile: HardwareProfile) -> HardwareProfile:
    """``profile`` (at the level checked before the runs) at the level of the runs' span: every
    per-call curve at the geometric mean of the check before the runs and the one after them,
    size by size (``span_levels``), kept as ``call_level["span"]`` (its levels and the mean of
    the two single levels). Why the mean: the runs lie between the two checks, and what the
    machine did in between is not measured; on the three draws with both checks (2026120722,
    2026120723, 2026120801; seen) train's median |error| went 11.6 -> 10.7, 4.3 -> 3.6,
    11.7 -> 9.6 % from the level before alone. Unchanged (no ``span``) when either check failed
    or is missing: the level before stands, or the calibration's."""
    record = dict(profile.call_level or {})
    after = record.get("after") or {}
    if not record.get("levels") or not after.get("levels"):  # a failed check has none (failed_level_record)
        return profile
    before_levels, after_levels = record["levels"], after["levels"]
    span = span_levels(before_levels, after_levels)

    def factor(figure: str, nbytes: float) -> float:  # the curves are at the level before: divide it out
        return ratio_at(span, nbytes) / ratio_at(before_levels, nbytes)
    record["span"] = {"levels": span, "level": math.sqrt(float(record["level"]) * float(after["level"]))}
    return dataclasses.replace(scale_call_curves(profile, factor), call_level=record)


def level_drift(record: Optional[dict]) -> Optional[float]:
    """The level after the runs over the level before them (``call_level`` with its ``after``):
    how far the machine's per-call cost moved while the configs ran; None when either check is
    missing or failed."""
    record = record or {}
    after = record.get("after") or {}
    before, later = record.get("level"), after.get("level")
    if before is None or later is None or "failed" in record or "failed" in after or before <= 0:
        return None
    return float(later) / float(before)


def failed_level_record(reason: str, previous: Optional[dict] = None) -> dict:
    """The ``call_level`` of a profile whose check failed: why, when, and the level the profile
    already carried (from an earlier folder's check, or none: the calibration's own)."""
    record: dict = {"measured": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    "failed": reason}
    previous = previous or {}
    # A checked profile has "level" (and "levels", by size); a failed one has none, only what it carried.
    carried = previous.get("level", previous.get("carried_level"))
    if carried is not None:
        record["carried_level"] = carried
    carried_levels = previous.get("levels", previous.get("carried_levels"))
    if carried_levels:
        record["carried_levels"] = carried_levels
    return record


def measure_call_level(profile: HardwareProfile, progress: Callable[[str], None] = lambda s: None,
                       repeats: int = CHECK_REPEATS,
                       after_round: Optional[Callable[[int], None]] = None) -> HardwareProfile:
    """Run the check on the Ray this process is connected to (``repeats`` rounds over the
    sizes, about 7 s a round) and return the profile at this session's level; a profile without
    per-call curves comes back unchanged. ``after_round(r)`` runs after each round (the step
    reads' check, ``testbed.calibration.readlevel``, so that its windows are spread too)."""
    one = profile.call_costs_for(1)
    if one is None or one.shards != 1:
        return profile
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    rounds: list[list[RunPoint]] = []
    for r in range(repeats):
        rounds.append([])
        for nbytes in CHECK_SIZES:
            progress(f"checking the per-call cost level of this session ({nbytes // KIB} KiB, round {r + 1} of {repeats})")
            rounds[-1].append(run_point(nbytes, 1, 1, CHECK_STEPS))
        if after_round is not None:
            after_round(r)
    by_round = [level_from_points(points, one) for points in rounds]
    ratios = median_ratios(by_round)
    points = [p for points in rounds for p in points]
    level = session_level(ratios)
    levels = size_levels(ratios)
    applied = {figure: levels for figure in ratios}
    record = {"measured": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              "sizes": list(CHECK_SIZES), "steps": CHECK_STEPS, "ratios": ratios, "level": level,
              "levels": levels, "repeats": repeats, "ratios_by_round": by_round,
              "runs": [{"gradient_bytes": p.gradient_bytes, "push_s": p.push_s, "pull_s": p.pull_s,
                        "apply_s": p.apply_s, "step_gap_s": p.step_gap_s,
                        "worker_cpu_per_step_s": p.worker_cpu_s / max(1, p.steps),
                        "shard_cpu_per_step_s": p.shard_cpu_s / max(1, p.steps),
                        # Kept, not applied: the init of a run on processes started for it (an
                        # init level from these, tried, missed held out: docs/model.md, "Tried
                        # after 2026120318").
                        "init_s": p.init_s} for p in points]}
    return apply_call_level(profile, applied, record)
