"""The node monitor's sampler, driven by a fake psutil and a fake clock."""

from types import SimpleNamespace

import pytest

from actors.monitor import ResourceSampler
from testbed.records.events import RESOURCE_SCHEMA


class FakePsutil:
    """Cumulative counters that grow by fixed amounts per tick."""

    def __init__(self):
        self.ticks = 0
        self.disk = True

    def cpu_percent(self, interval=None):
        assert interval is None  # never blocks
        return 25.0 * self.ticks

    def virtual_memory(self):
        return SimpleNamespace(used=1000 + self.ticks, percent=10.0)

    def disk_io_counters(self):
        if not self.disk:
            return None
        return SimpleNamespace(read_bytes=4_000 * self.ticks, write_bytes=2_000 * self.ticks)

    def net_io_counters(self):
        return SimpleNamespace(bytes_sent=100 * self.ticks, bytes_recv=300 * self.ticks)


class FakeClock:
    def __init__(self):
        self.ns = 0

    def __call__(self):
        return self.ns


def make():
    ps, mono = FakePsutil(), FakeClock()
    sampler = ResourceSampler("node-a", source=ps, mono_ns=mono, wall_ns=lambda: 10**18 + mono.ns)
    return ps, mono, sampler


def test_rates_are_counter_deltas_over_the_elapsed_time():
    ps, mono, sampler = make()
    sampler.prime()
    ps.ticks, mono.ns = 1, 500_000_000  # half a second later
    sampler.sample("c0", 2)
    ps.ticks, mono.ns = 3, 1_000_000_000
    sampler.sample("c0", 2)
    cols = sampler.take()
    assert list(cols) == [name for name, _ in RESOURCE_SCHEMA]
    assert cols["disk_read_bytes_per_s"] == [8_000.0, 16_000.0]
    assert cols["disk_write_bytes_per_s"] == [4_000.0, 8_000.0]
    assert cols["net_sent_bytes_per_s"] == [200.0, 400.0]
    assert cols["net_recv_bytes_per_s"] == [600.0, 1_200.0]
    assert cols["cpu_percent"] == [25.0, 75.0]
    assert cols["memory_used_bytes"] == [1001, 1003]
    assert cols["node"] == ["node-a"] * 2 and cols["config_id"] == ["c0"] * 2 and cols["repeat"] == [2, 2]
    assert cols["time_ns"] == [10**18 + 500_000_000, 10**18 + 1_000_000_000]
    assert sampler.take()["time_ns"] == []  # take() forgets


def test_a_counter_that_goes_backwards_gives_zero_not_a_negative_rate():
    ps, mono, sampler = make()
    ps.ticks = 5
    sampler.prime()
    ps.ticks, mono.ns = 1, 1_000_000_000
    sampler.sample("c", 0)
    assert sampler.take()["disk_read_bytes_per_s"] == [0.0]


def test_a_machine_without_disks_reports_zero_disk_rates():
    ps, mono, sampler = make()
    ps.disk = False
    sampler.prime()
    ps.ticks, mono.ns = 1, 1_000_000_000
    sampler.sample("c", 0)
    cols = sampler.take()
    assert cols["disk_read_bytes_per_s"] == [0.0] and cols["net_sent_bytes_per_s"] == [100.0]


def test_sampling_without_priming_primes_first():
    ps, mono, sampler = make()
    mono.ns = 1
    sampler.sample("c", 0)
    assert sampler.take()["disk_read_bytes_per_s"] == [pytest.approx(0.0)]


def test_steal_is_the_hypervisors_share_of_the_cpu_time_since_the_previous_sample():
    from collections import namedtuple
    Times = namedtuple("Times", "user system idle steal")

    class Stolen(FakePsutil):
        def __init__(self):
            super().__init__()
            self.times = Times(0.0, 0.0, 0.0, 0.0)

        def cpu_times(self):
            return self.times
    ps, mono = Stolen(), FakeClock()
    sampler = ResourceSampler("node-a", source=ps, mono_ns=mono, wall_ns=lambda: mono.ns)
    sampler.prime()
    # 2 cores over 1 s: 2 s of CPU time, 0.5 of it the host's
    ps.times, mono.ns = Times(1.0, 0.3, 0.2, 0.5), 10**9
    sampler.sample("c0", 0)
    # then none stolen, all of it busy
    ps.times, mono.ns = Times(2.5, 0.8, 0.2, 0.5), 2 * 10**9
    sampler.sample("c0", 0)
    # a closing sample before the counters ticked again: the share before, and the reference kept
    sampler.sample("c0", 0)
    ps.times, mono.ns = Times(3.0, 0.8, 0.2, 1.0), 3 * 10**9
    sampler.sample("c0", 0)
    assert sampler.take()["cpu_steal_percent"] == pytest.approx([25.0, 0.0, 0.0, 50.0])
    # a source without CPU time counters (or without steal) reads NaN, not 0
    ps2, mono2, plain = make()
    plain.prime()
    mono2.ns = 10**9
    plain.sample("c0", 0)
    [nan] = plain.take()["cpu_steal_percent"]
    assert nan != nan
