"""The I/O gate: one token, handed to the workers in a fixed order (``init_io: sequential``).

This reproduces the reference study's initialization, where nodes read the training data
one after another. A worker calls ``acquire(i)`` (blocks until it is worker i's turn),
reads, then ``release(i)`` (passes the token to the next worker in ``order``). The time a
worker spends in ``acquire`` is its ``init_wait`` phase; the gate records nothing itself.

``IOGate`` is a plain class, driven directly by unit tests; ``remote_gate`` makes it a Ray
actor. The actor is threaded, with one thread per worker plus one: every waiting
``acquire`` holds a thread, and ``release`` must always find one free, or the gate deadlocks.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Optional, Sequence

__all__ = ["IOGate", "GateTimeout", "remote_gate"]


class GateTimeout(TimeoutError):
    """A worker waited longer than its timeout; usually an earlier worker died holding the token."""


class IOGate:
    """Grants one token in ``order`` (worker indices, each once)."""

    def __init__(self, order: Sequence[int]) -> None:
        order = [int(i) for i in order]
        if not order or len(set(order)) != len(order):
            raise ValueError(f"order must list each worker index once, got {order}")
        self.order = order
        self._position = {w: k for k, w in enumerate(order)}
        self._turn = 0           # index into order of the worker that may hold the token
        self._held = False
        self._skipped: set[int] = set()
        self._cond = threading.Condition()

    def _check(self, worker_index: int) -> int:
        if worker_index not in self._position:
            raise ValueError(f"worker {worker_index} is not in the gate's order {self.order}")
        return self._position[worker_index]

    def acquire(self, worker_index: int, timeout_s: Optional[float] = None) -> float:
        """Block until it is ``worker_index``'s turn; returns the seconds waited."""
        mine = self._check(worker_index)
        t0 = time.monotonic()
        with self._cond:
            if self._turn > mine or worker_index in self._skipped:
                raise RuntimeError(f"worker {worker_index} already had its turn at the gate")
            ok = self._cond.wait_for(lambda: self._turn == mine and not self._held, timeout=timeout_s)
            if not ok:
                holder = self.order[self._turn] if self._turn < len(self.order) else None
                raise GateTimeout(f"worker {worker_index} waited {timeout_s} s at the I/O gate; "
                                  f"worker {holder} has the turn and has not released it")
            self._held = True
        return time.monotonic() - t0

    def release(self, worker_index: int) -> None:
        """Pass the token on; only the holder may release."""
        mine = self._check(worker_index)
        with self._cond:
            if not (self._held and self._turn == mine):
                raise RuntimeError(f"worker {worker_index} released the I/O gate without holding it")
            self._held = False
            self._advance()
            self._cond.notify_all()

    def skip(self, worker_index: int) -> None:
        """Give up a turn not yet taken (a worker that failed before reading), so the rest proceed."""
        mine = self._check(worker_index)
        with self._cond:
            if mine < self._turn or (mine == self._turn and self._held):
                return  # already had or holds its turn: release() is the way out
            self._skipped.add(worker_index)
            if mine == self._turn:
                self._advance()
            self._cond.notify_all()

    def _advance(self) -> None:  # with the lock held
        self._turn += 1
        while self._turn < len(self.order) and self.order[self._turn] in self._skipped:
            self._turn += 1

    def done(self) -> bool:
        """Whether every worker has had its turn."""
        with self._cond:
            return self._turn >= len(self.order)


def remote_gate(order: Sequence[int], **actor_options: Any) -> Any:
    """Start the gate as a threaded Ray actor (Ray is imported here only, so the plain class
    stays importable without it). Extra options (name, scheduling) go to ``.options``."""
    import ray

    options = {"num_cpus": 0, "max_concurrency": len(order) + 1, **actor_options}
    return ray.remote(IOGate).options(**options).remote(list(order))
