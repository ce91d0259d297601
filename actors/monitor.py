"""The node monitor: one per node, sampling CPU, memory, disk and network while a config runs.

``ResourceSampler`` is the plain class: it reads a psutil-like source and turns
the cumulative disk and network counters into rates over the time since the
previous sample, and the CPU time counters into the hypervisor's share ("steal": on a
virtual machine, the time its CPUs wanted to run and the host ran something else). The
clock and the source are passed in, so tests drive it with fakes. ``MonitorActor`` is the
thin Ray wrapper: ``start`` launches a background thread that samples every ``interval_s``
until ``stop``, which returns the samples as columns named as in ``RESOURCE_SCHEMA``.

The samples describe the whole node (every process on it), which is what shows
whether the disk or the network was busy, not only what the testbed asked of it.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional

from testbed.records.events import DEFAULT_INTERVAL_S, RESOURCE_SCHEMA

__all__ = ["RESOURCE_SCHEMA", "ResourceSampler", "MonitorActor", "DEFAULT_INTERVAL_S"]


def _counters(source: Any) -> tuple[int, int, int, int]:
    disk = source.disk_io_counters()  # None on machines without disks (some containers)
    net = source.net_io_counters()
    return (getattr(disk, "read_bytes", 0), getattr(disk, "write_bytes", 0),
            getattr(net, "bytes_sent", 0), getattr(net, "bytes_recv", 0))


class ResourceSampler:
    """Samples one node's utilisation; rates are over the interval since the previous sample."""

    def __init__(self, node: str, *, source: Any = None, wall_ns: Callable[[], int] = time.time_ns,
                 mono_ns: Callable[[], int] = time.monotonic_ns) -> None:
        if source is None:
            import psutil
            source = psutil
        self.node = node
        self.source = source
        self._wall_ns = wall_ns
        self._mono_ns = mono_ns
        self.columns: dict[str, list] = {name: [] for name, _ in RESOURCE_SCHEMA}
        self._last: Optional[tuple[int, tuple[int, int, int, int]]] = None
        self._cpu_last: Any = None
        self._steal_last = float("nan")

    def _cpu_times(self) -> Any:
        times = getattr(self.source, "cpu_times", None)
        return times() if times is not None else None

    def _steal_percent(self, now: Any) -> float:
        """The hypervisor's share of the CPU time since the reference counters, all cores (NaN
        without them: a source that has no ``steal``). Counters that have not moved since (the
        closing sample right after another: they tick every 10 ms) give the share before, and the
        reference stays for the next sample."""
        before = self._cpu_last
        if now is None or before is None or not hasattr(now, "steal"):
            self._cpu_last = now
            return float("nan")
        total = sum(now) - sum(before)
        if total <= 0:
            return self._steal_last
        self._cpu_last = now
        self._steal_last = 100.0 * max(0.0, now.steal - before.steal) / total
        return self._steal_last

    def prime(self) -> None:
        """Take the reference counters; psutil's cpu_percent(None) also measures from its previous call."""
        self.source.cpu_percent(interval=None)
        self._last = (self._mono_ns(), _counters(self.source))
        self._cpu_last, self._steal_last = self._cpu_times(), float("nan")

    def sample(self, config_id: str, repeat: int) -> None:
        if self._last is None:
            self.prime()
        t = self._mono_ns()
        counters = _counters(self.source)
        t_prev, prev = self._last
        dt_s = max(t - t_prev, 1) / 1e9
        # max(0, ...): counters can wrap or be reset (a NIC going down); a negative rate is noise.
        rates = [max(0, now - before) / dt_s for now, before in zip(counters, prev)]
        mem = self.source.virtual_memory()
        row = (self.node, config_id, int(repeat), self._wall_ns(), float(self.source.cpu_percent(interval=None)),
               int(mem.used), float(mem.percent), *rates, self._steal_percent(self._cpu_times()))
        for (name, _), value in zip(RESOURCE_SCHEMA, row, strict=True):
            self.columns[name].append(value)
        self._last = (t, counters)

    def take(self) -> dict[str, list]:
        """The samples so far, and forget them."""
        out = self.columns
        self.columns = {name: [] for name, _ in RESOURCE_SCHEMA}
        return out


class MonitorActor:
    """Thin Ray wrapper: a background thread samples between ``start`` and ``stop``."""

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        import ray
        if interval_s <= 0:
            raise ValueError(f"the monitor interval must be > 0 s, got {interval_s}")
        self.node = ray.get_runtime_context().get_node_id()
        self.interval_s = interval_s
        self.sampler = ResourceSampler(self.node)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def clock(self) -> int:
        """This node's wall clock, for the driver's offset estimate."""
        return time.time_ns()

    def start(self, config_id: str, repeat: int) -> str:
        self.stop()
        self.sampler.take()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, args=(config_id, repeat), daemon=True,
                                        name="resource-monitor")
        self._thread.start()
        return self.node

    def _loop(self, config_id: str, repeat: int) -> None:
        # Every psutil call happens in this thread: psutil keeps cpu_percent's reference per thread.
        self.sampler.prime()
        # Event.wait as the sleep: stop() ends the wait at once instead of after a full interval.
        while not self._stop.wait(self.interval_s):
            self.sampler.sample(config_id, repeat)
        # A closing sample: a config shorter than one interval still gets one.
        self.sampler.sample(config_id, repeat)

    def stop(self) -> dict[str, list]:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        return self.sampler.take()
