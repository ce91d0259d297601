"""Every choice a spec offers, as a string enum (the spec and the fault plans share them).

A module of its own so that ``faults`` and ``spec`` both import it and neither imports the
other: the fault checks compare ``cfg.sync`` with ``SyncMode.SYNC``, not with a string.
"""

import enum

__all__ = ["ComputeMode", "SyncMode", "InitIO", "Partition", "StepReads", "JitterDist", "PlacementStrategy"]


class ComputeMode(str, enum.Enum):
    """How a worker spends its compute time per step."""
    SLEEP = "sleep"    # exact duration, no CPU: an accelerator doing the work
    SPIN = "spin"      # busy CPU for the duration
    MATMUL = "matmul"  # real FLOPs through numpy; duration depends on the hardware


class SyncMode(str, enum.Enum):
    """How workers are kept consistent (docs/consistency.md has the semantics and the bounds)."""
    ASYNC = "async"  # asynchronous SGD, as the reference study's system ran it
    SYNC = "sync"    # bulk-synchronous: a barrier per step
    SSP = "ssp"      # stale-synchronous: at most `staleness` steps ahead of the slowest


class InitIO(str, enum.Enum):
    PARALLEL = "parallel"      # all workers read at once
    SEQUENTIAL = "sequential"  # one worker after another, enforced by the I/O gate


class Partition(str, enum.Enum):
    SHARD = "shard"  # each worker reads D / N bytes
    FULL = "full"    # each worker reads all D bytes (CNTK's reader)


class StepReads(str, enum.Enum):
    NONE = "none"
    SEQUENTIAL = "sequential"
    RANDOM = "random"


class JitterDist(str, enum.Enum):
    NONE = "none"
    UNIFORM = "uniform"
    NORMAL = "normal"
    LOGNORMAL = "lognormal"
    EXPONENTIAL = "exponential"


class PlacementStrategy(str, enum.Enum):
    PACK = "pack"
    SPREAD = "spread"
    STRICT_SPREAD = "strict_spread"
