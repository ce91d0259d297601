"""Exact mean value analysis (MVA) of a closed, single-class queueing network.

Terms (used the same way in the rest of ``testbed.model`` and in docs/model.md):

- *customer*: one worker; there are N of them and they never leave (a closed network).
- *cycle*: one training step of one worker: think, then visit every centre once.
- *think time* ``Z``: the part of a cycle spent alone (a delay with no waiting).
- *centre*: a resource the customers share. ``demand_s`` (``D_k``) is the service a
  customer needs there per cycle, at rate multiplier 1.
- *rate multiplier* ``alpha_k(j)``: how many times faster a centre serves when ``j``
  customers are present (a c-core CPU: ``min(j, c)``; a disk: ``B(j) / B(1)``).
- ``X(n)``: throughput with ``n`` customers, in cycles per second; ``R_k(n)``: time a
  cycle spends at centre k (waiting + service); ``Q_k(n)``: mean customers at centre k.

The recursion (Reiser and Lavenberg 1980) is exact for product-form networks: FCFS
centres with exponential service, or any service discipline that is symmetric. Where the
testbed departs from that (the server's service is nearly deterministic) is written in
docs/model.md. Pure: numpy and the standard library.
"""

from __future__ import annotations

import dataclasses
import enum
import math

import numpy as np

__all__ = ["CentreKind", "Centre", "MvaResult", "solve_mva", "throughput_bounds"]


class CentreKind(str, enum.Enum):
    QUEUE = "queue"                    # one server, first come first served
    DELAY = "delay"                    # as many servers as customers: nobody waits
    LOAD_DEPENDENT = "load_dependent"  # rate grows with the customers present (multi-core, disk)


@dataclasses.dataclass(frozen=True)
class Centre:
    """One service centre. ``rate_multipliers`` holds alpha(1), alpha(2), ...; alpha(j) for j
    past the end of the tuple is its last value (the rate saturates). Only load-dependent
    centres read it."""
    name: str
    demand_s: float
    kind: CentreKind = CentreKind.QUEUE
    rate_multipliers: tuple[float, ...] = (1.0,)

    def __post_init__(self) -> None:
        if not (self.demand_s >= 0 and math.isfinite(self.demand_s)):
            raise ValueError(f"centre {self.name!r}: demand_s must be finite and >= 0, got {self.demand_s}")
        if not self.rate_multipliers or any(not a > 0 for a in self.rate_multipliers):
            raise ValueError(f"centre {self.name!r}: rate multipliers must be > 0, got {self.rate_multipliers}")

    @classmethod
    def multi_server(cls, name: str, demand_s: float, servers: int) -> "Centre":
        """``servers`` identical servers in front of one queue (alpha(j) = min(j, servers))."""
        if servers < 1:
            raise ValueError(f"centre {name!r}: servers must be >= 1, got {servers}")
        return cls(name, demand_s, CentreKind.LOAD_DEPENDENT, tuple(float(j) for j in range(1, servers + 1)))

    def alphas(self, n: int) -> np.ndarray:
        """alpha(1..n) as an array."""
        a = np.asarray(self.rate_multipliers, dtype=float)
        if n <= a.size:
            return a[:n]
        return np.concatenate([a, np.full(n - a.size, a[-1])])

    @property
    def saturation_demand_s(self) -> float:
        """Demand per cycle at the centre's top rate: 1 / this is its throughput cap."""
        if self.kind is CentreKind.DELAY:
            return 0.0
        top = max(self.rate_multipliers) if self.kind is CentreKind.LOAD_DEPENDENT else 1.0
        return self.demand_s / top


@dataclasses.dataclass(frozen=True)
class MvaResult:
    """The solution for every population 0..N; index an array with n (index 0 is the empty network)."""
    think_s: float
    centres: tuple[Centre, ...]
    throughput_per_s: np.ndarray       # X(n), cycles per second over all customers
    response_s: dict[str, np.ndarray]  # R_k(n), per cycle
    queue_length: dict[str, np.ndarray]  # Q_k(n)

    @property
    def customers(self) -> int:
        return self.throughput_per_s.size - 1

    def cycle_s(self) -> np.ndarray:
        """Z + sum_k R_k(n): one customer's cycle time (index 0 is Z)."""
        return self.think_s + sum(self.response_s.values(), np.zeros(self.customers + 1))

    def utilization(self, name: str) -> np.ndarray:
        """Busy fraction of centre ``name`` (of its top rate for a load-dependent centre)."""
        centre = next(c for c in self.centres if c.name == name)
        return self.throughput_per_s * centre.saturation_demand_s


def solve_mva(centres: list[Centre] | tuple[Centre, ...], think_s: float, customers: int) -> MvaResult:
    """Exact MVA for 0..``customers`` customers, think time ``think_s`` and the given centres.

    For a load-dependent centre the marginal probabilities p_k(j | n) are carried along;
    their recursion for p_k(0 | n) subtracts nearly equal numbers close to saturation, so
    tiny negative values are clipped to 0 and the distribution renormalised (a known
    numerical weakness of load-dependent MVA; the clipped mass is below 1e-9 in practice).
    """
    if customers < 0:
        raise ValueError(f"customers must be >= 0, got {customers}")
    if not (think_s >= 0 and math.isfinite(think_s)):
        raise ValueError(f"think_s must be finite and >= 0, got {think_s}")
    centres = tuple(centres)
    names = [c.name for c in centres]
    if len(set(names)) != len(names):
        raise ValueError(f"centre names must be unique, got {names}")
    if customers and think_s + sum(c.demand_s for c in centres) <= 0:
        raise ValueError("a cycle of zero duration has no finite throughput; give some think time or demand")
    n_max = customers
    x = np.zeros(n_max + 1)
    r = {c.name: np.zeros(n_max + 1) for c in centres}
    q = {c.name: np.zeros(n_max + 1) for c in centres}
    alphas = {c.name: c.alphas(n_max) for c in centres if c.kind is CentreKind.LOAD_DEPENDENT}
    # p[name][j] = P(j customers at the centre | n - 1 customers in the network)
    p = {name: np.ones(1) for name in alphas}
    for n in range(1, n_max + 1):
        resp = {}
        for c in centres:
            if c.kind is CentreKind.DELAY:
                resp[c.name] = c.demand_s
            elif c.kind is CentreKind.QUEUE:
                # arrival theorem: an arriving customer sees the network with n - 1 customers
                resp[c.name] = c.demand_s * (1.0 + q[c.name][n - 1])
            else:
                j = np.arange(1, n + 1)
                resp[c.name] = float(np.sum(j * c.demand_s / alphas[c.name][:n] * p[c.name][:n]))
        x[n] = n / (think_s + sum(resp.values()))
        for c in centres:
            r[c.name][n] = resp[c.name]
            q[c.name][n] = x[n] * resp[c.name]
        for name, prev in p.items():
            demand = next(c.demand_s for c in centres if c.name == name)
            new = np.empty(n + 1)
            new[1:] = x[n] * demand / alphas[name][:n] * prev[:n]
            new[0] = 1.0 - new[1:].sum()
            np.clip(new, 0.0, None, out=new)
            p[name] = new / new.sum()
    return MvaResult(think_s, centres, x, r, q)


def throughput_bounds(think_s: float, centres: list[Centre] | tuple[Centre, ...], customers: int) -> float:
    """Asymptotic bound min(N / (Z + sum D), 1 / D_max): X(N) never exceeds it.

    D_max is the largest demand at a centre's top rate; with no queueing centre the
    cap is N / (Z + sum D) alone.
    """
    total = think_s + sum(c.demand_s / (c.rate_multipliers[0] if c.kind is CentreKind.LOAD_DEPENDENT else 1.0)
                          for c in centres)
    d_max = max((c.saturation_demand_s for c in centres), default=0.0)
    light = customers / total if total > 0 else math.inf
    return min(light, 1.0 / d_max) if d_max > 0 else light
