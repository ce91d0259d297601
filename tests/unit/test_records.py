import dataclasses
import itertools

import pytest

from testbed.records.events import EventRecorder, Phase, TimingEvent, columns_to_events, events_to_columns


class FakeClock:
    """Wall and monotonic clocks that advance by fixed ticks on every read."""

    def __init__(self, wall0=1_000_000, tick=250):
        self._wall = itertools.count(wall0, tick)
        self._mono = itertools.count(0, tick)

    def wall(self):
        return next(self._wall)

    def mono(self):
        return next(self._mono)


def recorder(clock=None, **kw):
    clock = clock or FakeClock()
    args = dict(run_id="r", config_id="c", repeat=1, actor="worker-0", role="worker", node="n1")
    args.update(kw)
    return EventRecorder(**args, wall_ns=clock.wall, mono_ns=clock.mono)


def test_timed_records_one_event_with_fake_clock():
    rec = recorder()
    with rec.timed(Phase.COMPUTE, step=3, nbytes=7):
        pass
    (ev,) = rec.events()
    assert ev == TimingEvent("r", "c", 1, "worker-0", "worker", "n1", "compute", 3, 1_000_000, 250, 7, -1)


def test_timed_records_even_when_body_raises():
    rec = recorder()
    with pytest.raises(RuntimeError):
        with rec.timed(Phase.PUSH, step=0):
            raise RuntimeError("boom")
    assert [e.phase for e in rec.events()] == ["push"]


def test_event_is_immutable_and_checked():
    ev = TimingEvent("r", "c", 0, "a", "worker", "n", "pull", 0, 10, 5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ev.duration_ns = 1
    assert ev.end_ns == 15
    with pytest.raises(ValueError):
        TimingEvent("r", "c", 0, "a", "worker", "n", "pull", 0, 10, -5)
    with pytest.raises(ValueError):
        TimingEvent("r", "c", 0, "a", "worker", "n", "lunch", 0, 10, 5)
    with pytest.raises(ValueError):
        TimingEvent("r", "c", 0, "a", "chef", "n", "pull", 0, 10, 5)


def test_export_merges_several_actors_into_columns():
    a, b = recorder(actor="worker-0"), recorder(actor="server-0", role="server")
    a.record(Phase.PUSH, 0, 100, 10, 64)
    b.record(Phase.QUEUE, 0, 101, 2)
    b.record(Phase.APPLY, 0, 103, 3, 64, staleness=2)
    cols = events_to_columns([a.export(), b.export()])
    assert cols["actor"] == ["worker-0", "server-0", "server-0"]
    assert cols["phase"] == ["push", "queue", "apply"]
    assert cols["staleness"] == [-1, -1, 2]
    events = columns_to_events(cols)
    assert events[2].role == "server" and events[2].bytes == 64


def test_recorder_memory_is_compact():
    rec = recorder()
    for i in range(10_000):
        rec.record(Phase.COMPUTE, i, i, 1)
    ex = rec.export()
    per_event = (len(ex["phase"]) + sum(ex[k].itemsize * len(ex[k])
                 for k in ("step", "start_ns", "duration_ns", "bytes", "staleness"))) / len(rec)
    assert per_event <= 48
