"""The parameter-server shard: a plain class, made a Ray actor where the run is launched.

A shard holds a contiguous slice of the float32 parameters and applies pushed
gradient slices one at a time, in place (``w -= lr * g``). The Ray actor is
threaded (several calls in flight) so that a push's arrival is seen when it
happens; a lock then serialises the applies, which is what makes the shard a
queue: the time a push waits for the lock is its ``queue`` phase.

Every event a shard records names it: its actor is ``server-<shard>``.

A pull that is due right after a push travels with it: ``push_pull`` applies, then
answers with the parameters as of that update (one round trip instead of two, and one
lock hold). ``push`` and ``pull`` alone remain for steps without a pull and for ``ssp``,
whose clock tick comes between the two.

In ``sync`` mode a worker pushes and pulls with ``push_pull_at(..., version)``, which
applies, then blocks until the shard has applied ``version`` updates (N x (k + 1) after
step k) and returns the parameters as they were at exactly that version (``pull_at`` is
the same wait without a push). The first such pull takes a
snapshot; it always finds the version exactly at the target, because no worker can
push step k + 1 before its own pull of step k has returned. The shard does not
need to know N: the target is the worker's.

Faults (``testbed.config.faults``). Every ``checkpoint_every`` updates the shard hands its state
(parameters, version, per-worker counts) to its ``checkpoint`` hook, timed as
``checkpoint``; the actor writes it to the run folder (``actors.state``). A ``kill_server``
fault calls the ``crash`` hook when a push arrives after the given number of updates; the
actor saves its events and exits. Ray restarts it: the new process reloads the last
checkpoint, so the updates applied since are lost (counted in ``stats()["lost_updates"]``),
and records the time from the crash as ``restart``. Pushes that were in flight are retried
by Ray; a push the shard already holds (its step is not newer than the last one applied
from that worker) is acknowledged without applying it again, so every push counts once.

Shaped links (``links``, docs/network.md): a push first crosses the shard's inbound link
(its fair share of the bandwidth, then the latency) in the request's thread, before the
apply lock, so a push waiting for the link holds nothing; a pull's slice crosses the
outbound link after the copy, outside the lock. Each wait is recorded as ``link_in`` or
``link_out`` (part of the worker's push or pull, as ``queue`` and ``apply`` are). ``near``
says the calling worker is on the shard's node (its ``same_node`` figures).
"""

from __future__ import annotations

import gc
import os
import threading
import time
from typing import Any, Callable, Optional

import numpy as np

from actors.state import checkpoint_path, crash_path, load_state, save_state
from testbed.config.faults import ShardFaults
from testbed.config.spec import Network
from testbed.emulation.apply import apply_in_place, apply_scratch
from testbed.emulation.compute import initial_parameters
from testbed.emulation.network import ShardLinks
from testbed.records.events import EventRecorder, Phase

__all__ = ["ParameterServer", "ServerActor"]


class ParameterServer:
    """One shard of the parameters: elements [lo, hi) of the model."""

    def __init__(self, *, shard: int, lo: int, hi: int, seed: int, learning_rate: float,
                 recorder: EventRecorder, apply_extra_s: float = 0.0, wait_timeout_s: float = 300.0,
                 sleep: Callable[[float], None] = time.sleep, faults: ShardFaults = ShardFaults(),
                 checkpoint: Optional[Callable[[dict[str, Any]], None]] = None,
                 crash: Optional[Callable[[], None]] = None, links: Optional[ShardLinks] = None,
                 reply_buffers: int = -1, sync_rounds: bool = False) -> None:
        """``links``: the shard's shaped links (None or unshaped: transfers are not shaped);
        ``reply_buffers``: -1 (a plain object) copies the parameters into a new array for every
        pull; n >= 0 (the Ray actor) copies them into reused buffers, n of them touched now
        (``_reply_copy`` says why and when that is safe), and with ``sync_rounds`` (a sync run)
        also touches the two buffers its rounds' snapshots alternate;
        ``apply_extra_s``: emulated service time added to every apply (slept under the lock,
        so it queues like real work without using a core); ``wait_timeout_s``: the longest
        ``pull_at`` waits before it gives up (a worker has failed)."""
        if hi <= lo:
            raise ValueError(f"shard {shard} is empty: [{lo}, {hi})")
        self.shard = shard
        self.lo, self.hi = lo, hi
        self.learning_rate = np.float32(learning_rate)
        self.recorder = recorder
        self.apply_extra_s = apply_extra_s
        self.wait_timeout_s = wait_timeout_s
        self._sleep = sleep
        self.w = initial_parameters(seed, lo, hi)
        # Scratch for lr * g, reused: no allocation per update (testbed.emulation.apply says why).
        self._scaled = apply_scratch(self.w.size)
        self._lock = threading.Lock()
        self._applied = threading.Condition(self._lock)  # notified after an apply when pulls wait
        self._waiting = 0                # pulls blocked in pull_at
        self._snapshot: tuple[int, np.ndarray] | None = None  # (version, parameters) for pull_at
        self.reply_buffers = reply_buffers >= 0
        self._thread = threading.local()  # this thread's reply buffer
        # Buffers touched up front (setup, untimed), handed to the threads as they first copy.
        self._spare = [self._touched() for _ in range(max(0, reply_buffers))]
        # sync's snapshots: two buffers in turn (a round's snapshot is rewritten two rounds on,
        # when every reply of it has long been sent: no worker pushes round v + 2 before its
        # reply of round v + 1, which it asks for after its reply of round v came).
        self._rounds = [self._touched(), self._touched()] if self.reply_buffers and sync_rounds else []
        self.version = 0                 # number of updates applied so far
        self.pushes: dict[int, int] = {}  # worker -> pushes applied
        self.last_step: dict[int, int] = {}  # worker -> step of its last applied push (retries are duplicates)
        self.faults = faults
        self._checkpoint = checkpoint
        self._crash = crash
        self.crashed_at: list[int] = []  # versions at which kills happened (a restarted shard does not die again)
        self.lost_updates = 0            # applied, then lost with a crash (not in any checkpoint)
        self.restarts = 0
        # (worker, step) of the pushes applied since the last checkpoint: a crash loses them. A
        # push whose reply had not left the process when it died is retried by Ray and applied
        # again by the restart: then it was not lost after all (``_lost`` holds the candidates).
        self._since_checkpoint: list[tuple[int, int]] = []
        self._lost: set[tuple[int, int]] = set()
        self.retried_after_crash = 0
        self.links = links if links is not None and links.shaped else None

    def _receive(self, nbytes: int, near: bool) -> Optional[tuple[int, int]]:
        """A push's slice over the inbound link (outside the lock); (wall ns at its start, ns it took)."""
        if self.links is None:
            return None
        wall, t0 = self.recorder.now()
        self.links.receive(nbytes, near)
        return wall, self.recorder.mono_ns() - t0

    def _record_receive(self, received: Optional[tuple[int, int]], step: int, nbytes: int) -> None:
        """Record a push's ``link_in`` (call under the lock: the recorder's columns must not interleave)."""
        if received is not None:
            self.recorder.record(Phase.LINK_IN, step, received[0], received[1], nbytes)

    def _send(self, nbytes: int, near: bool, step: int) -> None:
        """A pulled slice over the outbound link (outside the lock), recorded as ``link_out``."""
        if self.links is None:
            return
        wall, t0 = self.recorder.now()
        self.links.send(nbytes, near)
        took = self.recorder.mono_ns() - t0
        with self._lock:
            self.recorder.record(Phase.LINK_OUT, step, wall, took, nbytes)

    def push(self, grad: np.ndarray, worker: int, step: int, pulled_version: int = -1, near: bool = False) -> int:
        """Apply one gradient slice; returns the shard's version after it.

        ``grad`` may be a read-only array (Ray hands over zero-copy views): it is only read.
        ``pulled_version`` is the shard version the worker last pulled; the apply records
        its staleness (updates applied in between), or -1 when unknown.
        """
        self._check(grad)
        received = self._receive(grad.nbytes, near)
        arrived = self.recorder.now()
        with self._lock:
            self._record_receive(received, step, grad.nbytes)
            return self._push_locked(grad, worker, step, pulled_version, arrived)

    def push_pull(self, grad: np.ndarray, worker: int, step: int,
                  pulled_version: int = -1, near: bool = False) -> tuple[int, np.ndarray, int]:
        """A push and the pull that is due after it, in one call: apply, then copy the
        parameters as of this update. Returns (version, parameters, wall-clock ns when the
        shard was done with the push): the worker splits the call into ``push`` and ``pull``
        there."""
        self._check(grad)
        received = self._receive(grad.nbytes, near)
        arrived = self.recorder.now()
        with self._lock:
            self._record_receive(received, step, grad.nbytes)
            self._push_locked(grad, worker, step, pulled_version, arrived)
            pushed_wall_ns = self.recorder.now()[0]
            version, params = self.version, self._reply_copy()
        self._send(params.nbytes, near, step)
        return version, params, pushed_wall_ns

    def push_pull_at(self, grad: np.ndarray, worker: int, step: int, pulled_version: int,
                     version: int, near: bool = False) -> tuple[int, np.ndarray, int, int]:
        """``sync``: a push, then the pull of ``version`` (``pull_at``), in one call. Returns
        (version, parameters at exactly it, ns waited for the round, wall-clock ns when the
        shard was done with the push)."""
        self._check(grad)
        received = self._receive(grad.nbytes, near)
        arrived = self.recorder.now()
        with self._applied:
            self._record_receive(received, step, grad.nbytes)
            self._push_locked(grad, worker, step, pulled_version, arrived)
            pushed_wall_ns, t0 = self.recorder.now()
            params, waited_ns = self._pull_at_locked(version, t0)
        self._send(params.nbytes, near, step)
        return version, params, waited_ns, pushed_wall_ns

    def _touched(self) -> np.ndarray:
        buf = np.empty_like(self.w)
        np.copyto(buf, self.w)  # every page written once: the process owns it from here on
        return buf

    def _reply_copy(self) -> np.ndarray:
        """The parameters as of now, for one reply (call under the lock).

        The Ray actor copies them into a buffer of this thread's own, reused by its next call:
        Ray serialises a call's return (into the reply, or into the object store) on the
        thread that ran it before that thread runs another call, so the buffer is free again
        by then. A new array each time costs page faults whenever the allocator hands back
        memory the process has not touched: on the 2-core VM of 2026-12-01 an 8 MiB
        ``w.copy()`` took 0.2-0.4 ms into reused memory and 15 ms into fresh pages, which one
        pull in three to ten met (most often in a process's first steps), so a large pull's
        time was bimodal (3-4 ms or 18-20 ms) and its mean depended on the run's length and
        on pull_every, which no calibrated figure can follow."""
        if not self.reply_buffers:
            return self.w.copy()
        buf = getattr(self._thread, "buf", None)
        if buf is None:
            buf = self._thread.buf = self._spare.pop() if self._spare else np.empty_like(self.w)
        np.copyto(buf, self.w)
        return buf

    def _round_copy(self) -> np.ndarray:
        """sync's snapshot of the round just completed (call under the lock): the older of
        the two round buffers (a new array without them)."""
        if not self._rounds:
            return self.w.copy()
        buf = self._rounds.pop(0)
        self._rounds.append(buf)
        np.copyto(buf, self.w)
        return buf

    def _check(self, grad: np.ndarray) -> None:
        if grad.shape != self.w.shape:
            raise ValueError(f"shard {self.shard} expects {self.w.shape[0]} values, got {grad.shape}")

    def _push_locked(self, grad: np.ndarray, worker: int, step: int, pulled_version: int,
                     arrived: tuple[int, int]) -> int:
        """The apply of a push, with the lock held; ``arrived``: (wall, monotonic) ns of its arrival."""
        wall_arrive, t_arrive = arrived
        if (self._crash is not None and self.version in self.faults.kill_updates
                and self.version not in self.crashed_at):
            self.crashed_at.append(self.version)
            self._crash()
        if step <= self.last_step.get(worker, -1):  # a retried push this state already holds
            return self.version
        t_start = self.recorder.mono_ns()
        self._apply(grad)
        if self.apply_extra_s > 0:
            self._sleep(self.apply_extra_s)
        staleness = self.version - pulled_version if pulled_version >= 0 else -1
        self.version += 1
        self.pushes[worker] = self.pushes.get(worker, 0) + 1
        self.last_step[worker] = step
        self._since_checkpoint.append((worker, step))
        if (worker, step) in self._lost:  # lost with the crash, then retried: applied after all
            self._lost.discard((worker, step))
            self.lost_updates -= 1
            self.retried_after_crash += 1
        t_end = self.recorder.mono_ns()
        # Recorded under the lock: the recorder's columns must not interleave between threads.
        self.recorder.record(Phase.QUEUE, step, wall_arrive, t_start - t_arrive)
        self.recorder.record(Phase.APPLY, step, wall_arrive + (t_start - t_arrive), t_end - t_start,
                             grad.nbytes, staleness)
        every = self.faults.checkpoint_every
        if every and self._checkpoint is not None and self.version % every == 0:
            with self.recorder.timed(Phase.CHECKPOINT, step, self.w.nbytes):
                self._checkpoint(self.state())
            self._since_checkpoint = []
        if self._waiting:
            self._applied.notify_all()
        return self.version

    def _apply(self, grad: np.ndarray) -> None:
        """``w -= lr * g`` in place, without allocating and without copying ``grad``."""
        apply_in_place(self.w, grad, self.learning_rate, self._scaled)

    def pull(self, step: int = -1, near: bool = False) -> tuple[int, np.ndarray]:
        """The shard's version and a consistent copy of its parameters (``step``: the puller's, for its record)."""
        with self._lock:
            version, params = self.version, self._reply_copy()
        self._send(params.nbytes, near, step)
        return version, params

    def pull_at(self, version: int, near: bool = False) -> tuple[int, np.ndarray, int]:
        """Wait until ``version`` updates are applied; return ``version``, the parameters as they
        were at exactly that version, and the nanoseconds spent waiting (the ``sync`` barrier).

        Raises ``TimeoutError`` after ``wait_timeout_s`` (another worker has failed or stalled)
        and ``RuntimeError`` if the shard moved past ``version`` before any pull asked for it
        (the workers are not in lock step: a bug).
        """
        t0 = self.recorder.mono_ns()
        with self._applied:
            params, waited_ns = self._pull_at_locked(version, t0)
        self._send(params.nbytes, near, -1)
        return version, params, waited_ns

    def _pull_at_locked(self, version: int, t0: int) -> tuple[np.ndarray, int]:
        """``pull_at``'s wait and snapshot, with the lock held; ``t0``: when the wait began."""
        self._waiting += 1
        try:
            reached = self._applied.wait_for(lambda: self.version >= version, timeout=self.wait_timeout_s)
        finally:
            self._waiting -= 1
        if not reached:
            raise TimeoutError(f"shard {self.shard}: waited {self.wait_timeout_s:g}s for version {version}, "
                               f"still at {self.version}; a worker has failed or stalled")
        waited_ns = self.recorder.mono_ns() - t0
        if self._snapshot is None or self._snapshot[0] != version:
            if self.version != version:
                raise RuntimeError(f"shard {self.shard}: asked for version {version} but already at "
                                   f"{self.version} with no snapshot of it; workers are out of lock step")
            self._snapshot = (version, self._round_copy())  # read-only from here on: pulls share it
        return self._snapshot[1], waited_ns

    def state(self) -> dict[str, Any]:
        """What a checkpoint holds (call under the lock, or when no push runs)."""
        return {"version": self.version, "w": self.w, "pushes": dict(self.pushes),
                "last_step": dict(self.last_step)}

    def recover(self, checkpoint: Optional[dict[str, Any]], crash: dict[str, Any]) -> None:
        """Become the restart of the shard that saved ``crash``: back to ``checkpoint`` (the
        initial parameters when there is none), counting the updates lost."""
        if checkpoint is not None:
            self.w[:] = checkpoint["w"]
            self.version = checkpoint["version"]
            self.pushes = dict(checkpoint["pushes"])
            self.last_step = dict(checkpoint["last_step"])
        self.crashed_at = list(crash["crashed_at"])
        self.lost_updates = crash["lost_updates"] + crash["version"] - self.version
        self.restarts = crash["restarts"] + 1
        self.retried_after_crash = crash.get("retried_after_crash", 0)
        self._lost = {(int(w), int(s)) for w, s in crash.get("since_checkpoint", [])}

    def crash_record(self) -> dict[str, Any]:
        """What the restarted shard needs from this one besides the checkpoint."""
        return {"version": self.version, "crashed_at": list(self.crashed_at), "lost_updates": self.lost_updates,
                "restarts": self.restarts, "retried_after_crash": self.retried_after_crash,
                "since_checkpoint": [list(ws) for ws in self._since_checkpoint]}

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"shard": self.shard, "lo": self.lo, "hi": self.hi, "updates": self.version,
                    "pushes": dict(self.pushes), "lost_updates": self.lost_updates, "restarts": self.restarts,
                    "retried_after_crash": self.retried_after_crash}

    def parameters(self) -> np.ndarray:
        with self._lock:
            return self.w.copy()


class ServerActor:
    """Thin Ray wrapper around ``ParameterServer``; made remote (threaded) by ``testbed.runner.run``."""

    def __init__(self, *, shard: int, lo: int, hi: int, seed: int, learning_rate: float,
                 run_id: str, config_id: str, repeat: int, apply_extra_s: float = 0.0,
                 wait_timeout_s: float = 300.0, faults: ShardFaults = ShardFaults(),
                 state_dir: Optional[str] = None, network: Optional[Network] = None,
                 reply_buffers: int = 0, sync_rounds: bool = False) -> None:
        """``state_dir``: where checkpoints and a crash's record go (needed with checkpoints or a kill);
        ``network``: the run's link figures (None: unshaped); ``reply_buffers``: the pulls'
        buffers to touch at start-up (one per worker: ``ParameterServer._reply_copy``);
        ``sync_rounds``: a sync run (its rounds' two snapshot buffers are touched too)."""
        import ray
        ctx = ray.get_runtime_context()
        self.identity = {"node": ctx.get_node_id(), "ip": ray.util.get_node_ip_address(), "pid": os.getpid()}
        recorder = EventRecorder(run_id=run_id, config_id=config_id, repeat=repeat, actor=f"server-{shard}",
                                 role="server", node=self.identity["node"])
        self.state_dir = state_dir
        hooks = {"checkpoint": self._save_checkpoint, "crash": self._crash} if state_dir else {}
        self.server = ParameterServer(shard=shard, lo=lo, hi=hi, seed=seed, learning_rate=learning_rate,
                                      recorder=recorder, apply_extra_s=apply_extra_s,
                                      wait_timeout_s=wait_timeout_s, faults=faults, **hooks,
                                      reply_buffers=reply_buffers, sync_rounds=sync_rounds,
                                      links=ShardLinks(f"server-{shard}", network) if network is not None else None)
        crash = load_state(crash_path(state_dir, f"server-{shard}")) if state_dir else None
        if crash is not None:  # this process is Ray's restart of one that crashed
            recorder.restore(crash["events"])
            self.server.recover(load_state(checkpoint_path(state_dir, shard)), crash)
            wall = time.time_ns()
            recorder.record(Phase.RESTART, -1, crash["crashed_wall_ns"], max(0, wall - crash["crashed_wall_ns"]))
        # Every push arrives in object-store memory; map all of it now (at setup), or the first
        # pass through the store pays ~260 page faults per 16 MiB inside the apply (actors/shm.py).
        from actors.shm import premap_object_store
        self.identity["object_store_premap"] = premap_object_store()

    def _save_checkpoint(self, state: dict[str, Any]) -> None:
        save_state(checkpoint_path(self.state_dir, self.server.shard), state)

    def _crash(self) -> None:
        """The kill_server fault (called under the shard's lock): save the events, exit at once."""
        save_state(crash_path(self.state_dir, f"server-{self.server.shard}"),
                   {"events": self.server.recorder.export(), "crashed_wall_ns": time.time_ns(),
                    **self.server.crash_record()})
        os._exit(1)

    def reconfigure(self, **kwargs: Any) -> None:
        """Serve another config's shard in this same process: the constructor again, with the
        new config's arguments (``testbed.runner.run.ReusedActors``); no call may be in flight."""
        self.__dict__.clear()
        gc.collect()  # the last config's buffers go before the next one's are made
        self.__init__(**kwargs)  # type: ignore[misc]

    def cpu_s(self) -> float:
        """CPU seconds this actor's process has used (all its threads)."""
        import time
        return time.process_time()

    def ready(self) -> dict[str, Any]:
        return self.identity

    def push(self, grad: np.ndarray, worker: int, step: int, pulled_version: int = -1, near: bool = False) -> int:
        return self.server.push(grad, worker, step, pulled_version, near)

    def pull(self, step: int = -1, near: bool = False) -> tuple[int, np.ndarray]:
        return self.server.pull(step, near)

    def push_pull(self, grad: np.ndarray, worker: int, step: int, pulled_version: int = -1,
                  near: bool = False) -> tuple:
        return self.server.push_pull(grad, worker, step, pulled_version, near)

    def push_pull_at(self, grad: np.ndarray, worker: int, step: int, pulled_version: int, version: int,
                     near: bool = False) -> tuple:
        return self.server.push_pull_at(grad, worker, step, pulled_version, version, near)

    def pull_at(self, version: int, near: bool = False) -> tuple[int, np.ndarray, int]:
        return self.server.pull_at(version, near)

    def stats(self) -> dict[str, Any]:
        return self.server.stats()

    def parameters(self) -> np.ndarray:
        return self.server.parameters()

    def events(self) -> dict[str, Any]:
        # Taken under the lock so no apply is half-recorded.
        with self.server._lock:
            return self.server.recorder.export()
