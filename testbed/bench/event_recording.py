"""Figure 5: what recording one event costs, in time and in memory.

In this process (recording is plain Python, no Ray): ``n`` events through
``EventRecorder.timed`` around an empty body, as the worker records its phases, against the
same loop with an empty ``with`` block (a do-nothing context manager); the difference per
event is the recording's cost. ``EventRecorder.record`` (what a shard calls) is timed too.
Memory: bytes the recorder holds per event after ``n`` events (its arrays' buffers), and the
projection to a million events. Targets: < 2 us per event; a million events < 200 MB.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from typing import Any

from testbed.bench.common import Check, Figure, load_average, now_iso
from testbed.records.events import EventRecorder, Phase

__all__ = ["run", "measure", "TARGET_S", "TARGET_MILLION_BYTES"]

TARGET_S = 2e-6
TARGET_MILLION_BYTES = 200e6


def _recorder() -> EventRecorder:
    return EventRecorder(run_id="bench", config_id="events", repeat=0, actor="worker-0", role="worker")


def _loop_timed(n: int) -> float:
    rec = _recorder()
    t0 = time.perf_counter()
    for step in range(n):
        with rec.timed(Phase.COMPUTE, step):
            pass
    return time.perf_counter() - t0


def _loop_record(n: int) -> float:
    rec = _recorder()
    t0 = time.perf_counter()
    for step in range(n):
        rec.record(Phase.APPLY, step, 0, 0, 1024, 0)
    return time.perf_counter() - t0


def _loop_empty(n: int) -> float:
    null = contextlib.nullcontext()
    t0 = time.perf_counter()
    for _ in range(n):
        with null:
            pass
    return time.perf_counter() - t0


def held_bytes(rec: EventRecorder) -> int:
    """Bytes the recorder's per-event arrays hold (allocated capacity, not just length)."""
    return sum(sys.getsizeof(a) for a in (rec._phase, rec._step, rec._start, rec._dur, rec._bytes, rec._stale))


def measure(n: int, repeats: int) -> dict[str, Any]:
    runs: dict[str, list[float]] = {"timed": [], "record": [], "empty": []}
    for _ in range(repeats):  # interleaved
        runs["timed"].append(_loop_timed(n) / n)
        runs["record"].append(_loop_record(n) / n)
        runs["empty"].append(_loop_empty(n) / n)
    med = {k: statistics.median(v) for k, v in runs.items()}
    rec = _recorder()
    for step in range(n):
        rec.record(Phase.COMPUTE, step, 0, 0)
    per_event = held_bytes(rec) / n
    return {"events": n, "repeats": repeats, "timed_s_per_event": med["timed"] - med["empty"],
            "record_s_per_event": med["record"], "empty_loop_s_per_event": med["empty"],
            "bytes_per_event": per_event, "million_events_bytes": per_event * 1e6,
            "samples_s_per_event": runs}


def run(quick: bool = False) -> Figure:
    load, date = load_average(), now_iso()
    raw = measure(100_000 if quick else 1_000_000, 3 if quick else 7)
    checks = (Check("cost per timed event", raw["timed_s_per_event"] * 1e6, TARGET_S * 1e6, "<=", "us"),
              Check("memory of 1M events", raw["million_events_bytes"] / 1e6, TARGET_MILLION_BYTES / 1e6, "<=",
                    "MB"))
    return Figure("event_recording", "5. event recording: time and memory per event", checks, raw, load, date,
                  note="timed(): the worker's path, net of an empty with-block; record(): the shard's path",
                  quick=quick)
