"""A thread's wait for a core (``testbed.records.runqueue``) and the worker's record of it."""

import threading
import time

import pytest

from actors.server import ParameterServer
from actors.worker import LocalServerClient, Worker
from testbed.records import runqueue
from tests.factories import recorder as rec
from tests.factories import run_config as config


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(runqueue, "_missing", set())


def test_the_wait_is_the_second_figure_of_the_file(tmp_path, fresh):
    f = tmp_path / "schedstat"
    f.write_text("123456 7890 12\n")
    assert runqueue.waited_ns(str(f)) == 7890


def test_without_the_file_it_says_none_and_stops_trying(tmp_path, fresh):
    absent = tmp_path / "absent"
    assert runqueue.waited_ns(str(absent)) is None
    absent.write_text("1 2 3\n")
    assert runqueue.waited_ns(str(absent)) is None  # one try per process
    f = tmp_path / "schedstat"
    f.write_text("1 2 3\n")
    assert runqueue.waited_ns(str(f)) == 2  # another file is not taken for the missing one


def test_a_malformed_file_says_none(tmp_path, fresh):
    f = tmp_path / "schedstat"
    f.write_text("garbage\n")
    assert runqueue.waited_ns(str(f)) is None


@pytest.mark.skipif(runqueue.waited_ns() is None, reason="this kernel keeps no per-thread scheduler statistics")
def test_each_thread_reads_its_own_growing_figure(fresh):
    seen = {}

    def own():
        first = runqueue.waited_ns()
        t = time.perf_counter()
        while time.perf_counter() - t < 0.02:
            pass
        seen["thread"] = (first, runqueue.waited_ns())

    before = runqueue.waited_ns()
    th = threading.Thread(target=own)
    th.start()
    th.join()
    first, last = seen["thread"]
    assert 0 <= first <= last
    assert runqueue.waited_ns() >= before >= 0


class FakeInput:
    """A worker's data input whose step read takes a few ms of sleep and spin."""
    step_reader = object()
    step_bytes = 4096

    def __init__(self):
        self.reads = 0

    def read_step(self):
        self.reads += 1
        time.sleep(0.002)


def _worker(cfg, data_input):
    servers = [ParameterServer(shard=i, lo=lo, hi=hi, seed=cfg.seed, learning_rate=cfg.learning_rate,
                               recorder=rec(f"server-{i}", "server"))
               for i, (lo, hi) in enumerate(cfg.shard_bounds())]
    return Worker(cfg, 0, LocalServerClient(servers), rec("worker-0", "worker"), sleep=lambda s: None,
                  data_input=data_input)


def test_every_step_read_has_its_wait_for_a_core_beside_it(fresh, monkeypatch):
    ticks = iter(range(0, 10**9, 1000))  # each reading 1 us later than the one before
    monkeypatch.setattr("actors.worker.waited_ns", lambda: next(ticks))
    w = _worker(config(), FakeInput())
    w.train()
    events = w.recorder.events()
    reads = [e for e in events if e.phase == "read"]
    waits = [e for e in events if e.phase == "read_runq"]
    assert len(reads) == w.input.reads == len(waits) > 0
    assert [e.step for e in waits] == [e.step for e in reads]
    assert all(e.duration_ns == 1000 for e in waits)
    # it starts with its read and is not part of it
    for r, q in zip(reads, waits):
        assert abs(q.start_ns - r.start_ns) < 5_000_000


def test_where_the_kernel_keeps_no_figure_nothing_is_recorded(fresh, monkeypatch):
    monkeypatch.setattr("actors.worker.waited_ns", lambda: None)
    w = _worker(config(), FakeInput())
    w.train()
    phases = [e.phase for e in w.recorder.events()]
    assert phases.count("read") > 0 and "read_runq" not in phases
