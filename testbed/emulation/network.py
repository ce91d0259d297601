"""Network links shaped in user space: bandwidth shared by concurrent transfers, and latency.

Terms. A *link* is one direction of one actor's network interface (full duplex: a shard's
inbound link carries the pushes it receives, its outbound link the pulls it serves). A
*transfer* is one message of ``nbytes`` crossing one or more links. A link shared by k active
transfers gives each bandwidth / k (processor sharing, the fluid model of fair sharing); a
transfer crossing several links goes at the smallest of its shares; when a transfer joins or
leaves, the others' rates change from that instant. After its bytes are through, a transfer
waits its links' latency, which occupies no bandwidth (the last byte still has to arrive).

Two parts: ``SharedLinks`` is the pure state (times are handed in, nothing sleeps), so the
sharing is exact and testable with a fake clock; ``Shaper`` blocks the calling thread for as
long as its transfer takes under that state, with a lock and a condition (thread-safe: a
threaded shard actor calls it from every request). ``Endpoint`` is one actor's pair of links;
``ShardLinks`` a shard's two endpoints, one for workers on other nodes and one for workers on its own.
No Ray here: the actors call these; docs/network.md says how, and what is not emulated.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from testbed.config.spec import LinkShape, Network

__all__ = ["Link", "SharedLinks", "Shaper", "Endpoint", "ShardLinks"]

# A transfer whose remaining bytes fall below this is done (float rounding over many rate changes).
_EPS_BYTES = 1e-6


@dataclass(frozen=True, eq=False)
class Link:
    """One direction of one interface. ``bandwidth_bytes_per_s`` None: unshaped (no limit).
    Links compare by identity: two links with the same figures are still two wires."""
    name: str
    bandwidth_bytes_per_s: Optional[float] = None
    latency_s: float = 0.0

    def __post_init__(self) -> None:
        if self.bandwidth_bytes_per_s is not None and not self.bandwidth_bytes_per_s > 0:
            raise ValueError(f"link {self.name!r}: bandwidth must be > 0 or None, got {self.bandwidth_bytes_per_s}")
        if not self.latency_s >= 0:
            raise ValueError(f"link {self.name!r}: latency must be >= 0, got {self.latency_s}")

    @property
    def shaped(self) -> bool:
        return self.bandwidth_bytes_per_s is not None or self.latency_s > 0


@dataclass
class _Flow:
    links: tuple[Link, ...]
    remaining_bytes: float
    finished_at: Optional[float] = None


@dataclass
class SharedLinks:
    """The processor-sharing state of a set of links; ``now`` is always handed in (seconds, any origin).

    ``start`` a transfer, ``advance`` the state to a time (completing transfers at their exact
    finish times, in order, each completion speeding up the rest), read ``finished_at``, and
    ``finish`` to forget a completed transfer."""
    t: float = 0.0
    _flows: dict[int, _Flow] = field(default_factory=dict)
    _ids: itertools.count = field(default_factory=itertools.count)

    def start(self, nbytes: float, links: Sequence[Link], now: float) -> int:
        if nbytes < 0:
            raise ValueError(f"a transfer carries >= 0 bytes, got {nbytes}")
        self.advance(now)
        flow_id = next(self._ids)
        flow = _Flow(tuple(links), float(nbytes))
        if nbytes <= _EPS_BYTES or self._rate_alone(flow) == math.inf:
            flow.remaining_bytes, flow.finished_at = 0.0, self.t
        self._flows[flow_id] = flow
        return flow_id

    def active(self, link: Link) -> int:
        """Transfers whose bytes are crossing ``link`` now."""
        return sum(1 for f in self._flows.values() if f.finished_at is None and any(x is link for x in f.links))

    def rate_bytes_per_s(self, flow_id: int) -> float:
        """The transfer's current rate: the smallest of its shares (inf on unshaped links; 0 when done)."""
        flow = self._flows[flow_id]
        if flow.finished_at is not None:
            return 0.0
        shares = [x.bandwidth_bytes_per_s / self.active(x) for x in flow.links if x.bandwidth_bytes_per_s is not None]
        return min(shares, default=math.inf)

    def finished_at(self, flow_id: int) -> Optional[float]:
        """When the transfer's last byte went through (None while it is under way)."""
        return self._flows[flow_id].finished_at

    def estimate_finish(self, flow_id: int) -> float:
        """When the transfer would finish if no transfer joined or left from now on."""
        flow = self._flows[flow_id]
        if flow.finished_at is not None:
            return flow.finished_at
        return self.t + flow.remaining_bytes / self.rate_bytes_per_s(flow_id)

    def finish(self, flow_id: int) -> float:
        """Forget a completed transfer; returns when its bytes were through."""
        flow = self._flows[flow_id]
        if flow.finished_at is None:
            raise ValueError(f"transfer {flow_id} is still under way")
        del self._flows[flow_id]
        return flow.finished_at

    def advance(self, now: float) -> list[int]:
        """Move every transfer on to ``now``; returns the ids that completed on the way.
        A clock read a little earlier than the state's time is taken as the state's time."""
        done: list[int] = []
        now = max(now, self.t)
        while True:
            live = {i: f for i, f in self._flows.items() if f.finished_at is None}
            if not live:
                break
            rates = {i: self.rate_bytes_per_s(i) for i in live}
            left_s = {i: f.remaining_bytes / rates[i] for i, f in live.items()}
            step = min(left_s.values())
            if self.t + step > now:
                for i, f in live.items():
                    f.remaining_bytes -= rates[i] * (now - self.t)
                break
            self.t += step
            for i, f in live.items():
                f.remaining_bytes -= rates[i] * step
                # The first to finish are marked by time, not by bytes left, so float rounding on a
                # large transfer can't leave a sliver that takes another round.
                if left_s[i] <= step or f.remaining_bytes <= _EPS_BYTES:
                    f.remaining_bytes, f.finished_at = 0.0, self.t
                    done.append(i)
        self.t = now
        return done

    @staticmethod
    def _rate_alone(flow: _Flow) -> float:
        return min((x.bandwidth_bytes_per_s for x in flow.links if x.bandwidth_bytes_per_s is not None),
                   default=math.inf)


def _wait(cond: threading.Condition, timeout_s: float) -> None:
    cond.wait(timeout_s)


class Shaper:
    """Links shaped together, for threads of one process. ``transfer(nbytes, *links)`` blocks for
    as long as the transfer takes while sharing its links with the transfers under way, then for
    the links' latency, and returns the seconds it waited.

    ``clock`` (seconds), ``sleep`` (the latency) and ``wait(condition, timeout_s)`` (a wait that a
    join or a completion may cut short) are passed in, so tests drive it with a fake clock."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 wait: Callable[[threading.Condition, float], None] = _wait) -> None:
        self._clock, self._sleep, self._wait = clock, sleep, wait
        self._cond = threading.Condition()
        self._state = SharedLinks(t=clock())

    def transfer(self, nbytes: float, *links: Link) -> float:
        start = self._clock()
        if not any(x.shaped for x in links):
            return 0.0
        if any(x.bandwidth_bytes_per_s is not None for x in links):
            with self._cond:
                flow = self._state.start(nbytes, links, self._clock())
                self._cond.notify_all()  # the transfers under way now share with this one: they recompute
                while True:
                    if self._state.advance(self._clock()):
                        self._cond.notify_all()  # someone finished: the rest speed up
                    if self._state.finished_at(flow) is not None:
                        break
                    self._wait(self._cond, max(0.0, self._state.estimate_finish(flow) - self._clock()))
                self._state.finish(flow)
        latency_s = sum(x.latency_s for x in links)
        if latency_s > 0:
            self._sleep(latency_s)
        return self._clock() - start

    def active(self, link: Link) -> int:
        with self._cond:
            self._state.advance(self._clock())
            return self._state.active(link)


class Endpoint:
    """One actor's interface: an inbound and an outbound link (full duplex) in one ``Shaper``.

    Latency is charged once a transfer, at the shard's end (``for_shard``), so a push or a pull
    that both ends shape waits it once; a worker's links carry bandwidth only (``for_worker``)."""

    def __init__(self, name: str, bandwidth_bytes_per_s: Optional[float], latency_s: float = 0.0, *,
                 shaper: Optional[Shaper] = None) -> None:
        self.shaper = shaper or Shaper()
        self.inbound = Link(f"{name}/in", bandwidth_bytes_per_s, latency_s)
        self.outbound = Link(f"{name}/out", bandwidth_bytes_per_s, latency_s)

    @classmethod
    def for_shard(cls, name: str, shape: LinkShape, *, shaper: Optional[Shaper] = None) -> "Endpoint":
        return cls(name, shape.bandwidth_bytes_per_s, shape.latency, shaper=shaper)

    @classmethod
    def for_worker(cls, name: str, shape: LinkShape, *, shaper: Optional[Shaper] = None) -> "Endpoint":
        return cls(name, shape.bandwidth_bytes_per_s, 0.0, shaper=shaper)

    @property
    def shaped(self) -> bool:
        return self.inbound.shaped

    def receive(self, nbytes: float) -> float:
        """A message arriving (a shard: a push); blocks for its share of the inbound link."""
        return self.shaper.transfer(nbytes, self.inbound)

    def send(self, nbytes: float) -> float:
        """A message leaving (a shard: a pull it serves; a worker: its gradient slices)."""
        return self.shaper.transfer(nbytes, self.outbound)


class ShardLinks:
    """A shard's interfaces: ``far`` to workers on other nodes (the spec's ``network`` figures) and
    ``near`` to workers on its own node (``network.same_node``). A run on one node emulates every
    actor as a node of its own, so there every worker is far (docs/network.md)."""

    def __init__(self, name: str, network: Network) -> None:
        self.far = Endpoint.for_shard(name, network)
        self.near = Endpoint.for_shard(f"{name}-local", network.same_node)

    @property
    def shaped(self) -> bool:
        return self.far.shaped or self.near.shaped

    def receive(self, nbytes: float, near: bool = False) -> float:
        """A pushed slice arriving; blocks for its share of the inbound link, then its latency."""
        return (self.near if near else self.far).receive(nbytes)

    def send(self, nbytes: float, near: bool = False) -> float:
        """A slice served to a pull leaving; blocks for its share of the outbound link, then its latency."""
        return (self.near if near else self.far).send(nbytes)
