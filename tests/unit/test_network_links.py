"""Shaped links: processor sharing on the pure state with a fake clock, the blocking wrapper
with a fake clock, and real threads sharing one link (lower bounds only: a wait never ends early)."""

from __future__ import annotations

import threading
import time

import pytest

from testbed.config.spec import parse_spec
from testbed.emulation.network import Endpoint, Link, Shaper, SharedLinks


class FakeClock:
    """Time moves only when the code under test sleeps or waits (one thread)."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t
        self.waits: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s

    def wait(self, cond, timeout_s: float) -> None:
        self.waits.append(timeout_s)
        self.t += timeout_s


def _shaper(clock: FakeClock) -> Shaper:
    return Shaper(clock=clock.now, sleep=clock.sleep, wait=clock.wait)


def test_one_transfer_takes_bytes_over_bandwidth():
    link = Link("a", 100.0)
    s = SharedLinks()
    f = s.start(1000, [link], 0.0)
    assert s.rate_bytes_per_s(f) == 100.0 and s.estimate_finish(f) == 10.0
    assert s.advance(9.99) == [] and s.finished_at(f) is None
    assert s.advance(10.0) == [f] and s.finish(f) == 10.0


def test_two_concurrent_transfers_share_the_link():
    link = Link("a", 100.0)
    s = SharedLinks()
    a, b = s.start(1000, [link], 0.0), s.start(1000, [link], 0.0)
    assert s.rate_bytes_per_s(a) == s.rate_bytes_per_s(b) == 50.0 and s.active(link) == 2
    s.advance(1000.0)
    assert s.finished_at(a) == s.finished_at(b) == 20.0  # each takes twice as long as alone
    assert 2000 / 20.0 <= link.bandwidth_bytes_per_s  # the aggregate rate stays within the link


def test_a_transfer_joining_midway_slows_the_first_and_leaving_speeds_up_the_second():
    link = Link("a", 100.0)
    s = SharedLinks()
    a = s.start(100, [link], 0.0)
    b = s.start(100, [link], 0.5)  # a has 50 bytes left; both go at 50 B/s from here
    assert s.rate_bytes_per_s(a) == 50.0 and s.estimate_finish(a) == pytest.approx(1.5)
    s.advance(5.0)
    assert s.finished_at(a) == pytest.approx(1.5)
    assert s.finished_at(b) == pytest.approx(2.0)  # 50 bytes shared by 1.5, the last 50 alone at 100 B/s


def test_a_transfer_crossing_two_links_goes_at_the_smaller_share():
    worker, shard = Link("worker", 100.0), Link("shard", 200.0)
    s = SharedLinks()
    f2 = s.start(1000, [worker, shard], 0.0)
    assert s.rate_bytes_per_s(f2) == 100.0  # the worker's link is the narrower
    f1 = s.start(1000, [worker], 0.0)
    f3 = s.start(1000, [shard], 0.0)
    # Worker link: 100 / 2 = 50 each; shard link: 200 / 2 = 100 each; f2 gets min(50, 100).
    assert (s.rate_bytes_per_s(f1), s.rate_bytes_per_s(f2), s.rate_bytes_per_s(f3)) == (50.0, 50.0, 100.0)
    s.advance(10.0)
    assert s.finished_at(f3) == pytest.approx(10.0)


def test_unshaped_links_and_empty_transfers_finish_at_once():
    s = SharedLinks()
    assert s.finished_at(s.start(10**9, [Link("free")], 3.0)) == 3.0
    assert s.finished_at(s.start(0, [Link("a", 1.0)], 4.0)) == 4.0
    with pytest.raises(ValueError):
        s.start(-1, [Link("a", 1.0)], 5.0)


def test_many_rate_changes_keep_the_bytes_exact():
    link = Link("a", 1e9)
    s = SharedLinks()
    ids = [s.start(1e9, [link], i * 1e-3) for i in range(50)]
    s.advance(1e6)
    finishes = [s.finished_at(i) for i in ids]
    assert finishes == sorted(finishes)
    # Work conservation: the link was busy from the first start to the last finish.
    assert finishes[-1] == pytest.approx(50.0, rel=1e-9)


def test_network_one_transfer_with_a_fake_clock():
    clock = FakeClock()
    net = _shaper(clock)
    assert net.transfer(1000, Link("a", 100.0, latency_s=0.25)) == pytest.approx(10.25)
    assert clock.t == pytest.approx(110.25)


def test_network_latency_only():
    clock = FakeClock()
    assert _shaper(clock).transfer(10**9, Link("a", None, latency_s=0.05)) == pytest.approx(0.05)
    assert clock.waits == []  # no bandwidth: nothing to share, no lock wait


def test_network_bandwidth_only():
    clock = FakeClock()
    assert _shaper(clock).transfer(125_000_000, Link("a", 1.25e8)) == pytest.approx(1.0)


def test_network_unshaped_costs_nothing():
    clock = FakeClock()
    assert _shaper(clock).transfer(10**9, Link("free")) == 0.0 and clock.t == 100.0


def test_threads_sharing_a_link_never_beat_its_bandwidth():
    link = Link("a", 2e6)
    net = Shaper()
    nbytes, threads_n = 20_000, 4
    spans: list[tuple[float, float, float]] = []
    lock = threading.Lock()

    def go():
        t0 = time.monotonic()
        waited = net.transfer(nbytes, link)
        with lock:
            spans.append((t0, time.monotonic(), waited))

    threads = [threading.Thread(target=go) for _ in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(spans) == threads_n and not any(t.is_alive() for t in threads)
    alone_s = nbytes / link.bandwidth_bytes_per_s
    assert all(waited >= alone_s * (1 - 1e-9) for _, _, waited in spans)
    whole_s = max(e for _, e, _ in spans) - min(s for s, _, _ in spans)
    assert threads_n * nbytes / whole_s <= link.bandwidth_bytes_per_s * (1 + 1e-9)
    assert net.active(link) == 0


def test_endpoints_from_the_spec():
    cfg = parse_spec({"name": "n", "network": {"bandwidth": "8Mbit", "latency": "2ms"}})
    shard = Endpoint.for_shard("shard0", cfg.network)
    worker = Endpoint.for_worker("worker0", cfg.network)
    assert shard.inbound.bandwidth_bytes_per_s == 1e6 and shard.inbound.latency_s == 0.002
    assert worker.outbound.latency_s == 0.0  # latency is charged once, at the shard
    assert shard.inbound is not shard.outbound  # full duplex: pushes and pulls don't share
    local = Endpoint.for_shard("shard0-local", cfg.network.same_node)
    assert not local.shaped and local.receive(10**9) == 0.0


def test_endpoint_receive_and_send_wait_with_a_fake_clock():
    clock = FakeClock()
    shard = Endpoint("s", 1000.0, 0.1, shaper=_shaper(clock))
    assert shard.receive(500) == pytest.approx(0.6) and shard.send(1000) == pytest.approx(1.1)


class ManualClock:
    """Time set by the test's thread; the transfers' threads poll it (a short real wait), so the
    test decides every instant at which the shared state is read: the results don't depend on
    how the threads are scheduled."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def wait(self, cond, timeout_s: float) -> None:
        cond.wait(0.002)

    def sleep(self, s: float) -> None:
        raise AssertionError("no latency in these tests")


def _start(net: Shaper, nbytes: float, link: Link, out: dict, key: str) -> threading.Thread:
    thread = threading.Thread(target=lambda: out.__setitem__(key, net.transfer(nbytes, link)), daemon=True)
    thread.start()
    return thread


def _until(predicate) -> None:
    deadline = time.monotonic() + 30.0  # a guard against a hang, not a measurement
    while not predicate():
        assert time.monotonic() < deadline, "the transfer threads did not get going"
        time.sleep(0.001)


def test_threads_two_concurrent_transfers_each_take_twice_as_long():
    clock, link, out = ManualClock(), Link("shard/in", 100.0), {}
    net = Shaper(clock=clock.now, sleep=clock.sleep, wait=clock.wait)
    threads = [_start(net, 1000, link, out, k) for k in "ab"]
    _until(lambda: net.active(link) == 2)
    clock.t = 10.0
    assert net.active(link) == 2  # alone, each would be done by now
    clock.t = 19.999
    assert net.active(link) == 2
    clock.t = 20.0
    assert net.active(link) == 0
    for t in threads:
        t.join(timeout=30)
    assert out == {"a": 20.0, "b": 20.0}
    assert 2 * 1000 / max(out.values()) <= link.bandwidth_bytes_per_s


def test_threads_a_transfer_joining_midway():
    clock, link, out = ManualClock(), Link("shard/in", 100.0), {}
    net = Shaper(clock=clock.now, sleep=clock.sleep, wait=clock.wait)
    first = _start(net, 100, link, out, "first")
    _until(lambda: net.active(link) == 1)
    clock.t = 0.5  # the first has 50 bytes left
    second = _start(net, 100, link, out, "second")
    _until(lambda: net.active(link) == 2)
    clock.t = 1.0
    assert net.active(link) == 2  # alone, the first would have finished at 1.0
    clock.t = 1.5
    assert net.active(link) == 1
    first.join(timeout=30)
    clock.t = 2.0  # the second's last 50 bytes went alone, at the full rate
    assert net.active(link) == 0
    second.join(timeout=30)
    assert out == {"first": 1.5, "second": 1.5}


def test_the_network_section_validates_and_sweeps():
    from testbed.config.errors import UserError
    from testbed.config.spec import expand
    spec = parse_spec({"name": "n", "network": {"latency": "50us"},
                       "sweep": {"network.bandwidth": ["1Gbit", "10Gbit"]}})
    configs = expand(spec)
    assert [c.network.bandwidth for c in configs] == [1e9, 1e10]
    assert configs[1].network.bandwidth_bytes_per_s == 1.25e9 and configs[1].network.latency == pytest.approx(5e-5)
    assert not parse_spec({"name": "n"}).network.shaped
    with pytest.raises(UserError, match="network.bandwidth: unknown rate unit 'GB'"):
        parse_spec({"name": "n", "network": {"bandwidth": "1GB"}})
    with pytest.raises(UserError, match="network.speed: unknown field"):
        parse_spec({"name": "n", "network": {"speed": "1Gbit"}})
