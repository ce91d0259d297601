"""A worker's disk input: the initialization read (through the I/O gate when sequential)
and the per-step input reads. Plain classes; the gate is reached through a client with
``acquire``/``release`` (the plain ``IOGate`` itself in tests, ``RayGateClient`` in runs).
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, Sequence

import numpy as np

from testbed.config.spec import InitIO, RunConfig, StepReads
from testbed.data.dataset import DatasetInfo
from testbed.data.diskio import DirectReader, StepReader, init_read_plan, plan_bytes
from testbed.records.events import EventRecorder, Phase

__all__ = ["GateClient", "RayGateClient", "WorkerInput"]

# How long a worker waits for the gate before giving up: long enough for every earlier
# worker's read of a large data set, short enough that a dead worker doesn't hang a sweep.
GATE_TIMEOUT_S = 3600.0


class GateClient(Protocol):
    def acquire(self, worker_index: int, timeout_s: Optional[float] = None) -> float: ...
    def release(self, worker_index: int) -> None: ...


class RayGateClient:
    """Calls the gate actor and waits for its answer."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def acquire(self, worker_index: int, timeout_s: Optional[float] = None) -> float:
        import ray
        return ray.get(self.handle.acquire.remote(worker_index, timeout_s))

    def release(self, worker_index: int) -> None:
        import ray
        ray.get(self.handle.release.remote(worker_index))


class WorkerInput:
    """Worker ``index``'s reads of the data set described by ``dataset``."""

    def __init__(self, cfg: RunConfig, index: int, dataset: DatasetInfo, gate: Optional[GateClient] = None) -> None:
        self.index = index
        self.plan = init_read_plan(dataset.files, cfg.workload.dataset_bytes, index, cfg.workers,
                                   cfg.data.partition)
        self.plan_bytes = plan_bytes(self.plan)
        self.gate = gate if cfg.data.init_io is InitIO.SEQUENTIAL else None
        self.reader = DirectReader(cfg.data.block_bytes, cache_bypass=dataset.cache_bypass)
        self.step_reader: Optional[StepReader] = None
        if cfg.data.step_reads is not StepReads.NONE:
            # A worker's step input is its own part of the data (its shard, or all with `full`).
            rng = np.random.default_rng([cfg.seed, 4, index])
            files: Sequence = self.plan if self.plan else dataset.files
            self.step_reader = StepReader(files, cfg.workload.sample_bytes, cfg.workload.minibatch,
                                          cfg.data.step_reads, rng, DirectReader(cfg.data.block_bytes,
                                                                                 dataset.cache_bypass))

    def read_init(self, rec: EventRecorder) -> int:
        """The init phase: wait for the gate (``init_wait``) when sequential, then read (``init_read``)."""
        if self.gate is not None:
            with rec.timed(Phase.INIT_WAIT):
                self.gate.acquire(self.index, GATE_TIMEOUT_S)
        try:
            with rec.timed(Phase.INIT_READ, nbytes=self.plan_bytes):
                got = self.reader.read_plan(self.plan)
        finally:
            if self.gate is not None:
                self.gate.release(self.index)
        return got

    @property
    def step_bytes(self) -> int:
        return self.step_reader.step_bytes if self.step_reader else 0

    def read_step(self) -> int:
        return self.step_reader.read_step() if self.step_reader else 0

    def close(self) -> None:
        self.reader.close()
        if self.step_reader is not None:
            self.step_reader.close()
