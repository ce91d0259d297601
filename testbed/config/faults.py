"""Faults injected from the spec, and the plan each actor follows. Pure: pydantic only.

The plan functions take a config (``testbed.config.spec.ConfigFields``) by attribute.

A spec's ``faults:`` list holds entries of three kinds (the ``kind`` field picks one):

- ``kill_worker`` {worker, step}: worker ``worker``'s process exits just before it starts
  step ``step``; Ray restarts the actor (``restarts``), which resumes at that step.
- ``straggler`` {worker, factor, from_step}: from step ``from_step`` on, the worker's compute
  takes ``factor`` times as long.
- ``kill_server`` {shard, update}: shard ``shard``'s process exits once it has applied
  ``update`` updates, when the next push arrives (before applying it). Ray restarts it; it
  reloads its last checkpoint (taken every ``checkpoint_every`` updates; none: the initial
  parameters), so the ``update mod checkpoint_every`` updates applied since are lost, and the
  pushes in flight are retried.

Terms: an *update* is one gradient slice applied by one shard; a shard receives one per
worker per step, so ``workers * steps`` in all. docs/reliability.md has the whole story.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from testbed.config.choices import SyncMode
from testbed.config.units import not_a_boolean

__all__ = ["KillWorker", "Straggler", "KillServer", "Fault", "WorkerFaults", "ShardFaults", "worker_faults",
           "shard_faults", "check_faults", "lost_updates_expected"]


Int = Annotated[int, BeforeValidator(not_a_boolean)]
Float = Annotated[float, BeforeValidator(not_a_boolean)]


class _Fault(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class KillWorker(_Fault):
    kind: Literal["kill_worker"]
    worker: Int = Field(ge=0)
    step: Int = Field(ge=0, description="the worker exits just before starting this step")


class Straggler(_Fault):
    kind: Literal["straggler"]
    worker: Int = Field(ge=0)
    factor: Float = Field(gt=1.0, le=1000.0, description="compute takes this many times as long")
    from_step: Int = Field(0, ge=0)


class KillServer(_Fault):
    kind: Literal["kill_server"]
    shard: Int = Field(ge=0)
    update: Int = Field(ge=1, description="the shard exits once it has applied this many updates")


Fault = Annotated[Union[KillWorker, Straggler, KillServer], Field(discriminator="kind")]


@dataclasses.dataclass(frozen=True)
class WorkerFaults:
    """What one worker does wrong: the steps before which it exits, and its slowdown."""
    kill_steps: tuple[int, ...] = ()
    straggler_factor: float = 1.0
    straggler_from_step: int = 0

    def slowdown(self, step: int) -> float:
        """How many times longer the compute of ``step`` takes."""
        return self.straggler_factor if step >= self.straggler_from_step else 1.0

    @property
    def straggles(self) -> bool:
        return self.straggler_factor != 1.0


@dataclasses.dataclass(frozen=True)
class ShardFaults:
    """When one shard exits (after how many applied updates), and how often it checkpoints."""
    kill_updates: tuple[int, ...] = ()
    checkpoint_every: int = 0


def worker_faults(cfg: Any, worker: int) -> WorkerFaults:
    kills = tuple(sorted(f.step for f in cfg.faults if isinstance(f, KillWorker) and f.worker == worker))
    slow = [f for f in cfg.faults if isinstance(f, Straggler) and f.worker == worker]
    if slow:
        return WorkerFaults(kills, slow[0].factor, slow[0].from_step)
    return WorkerFaults(kills)


def shard_faults(cfg: Any, shard: int) -> ShardFaults:
    kills = tuple(sorted(f.update for f in cfg.faults if isinstance(f, KillServer) and f.shard == shard))
    return ShardFaults(kills, cfg.checkpoint_every)


def lost_updates_expected(update: int, checkpoint_every: int) -> int:
    """Updates a shard loses when it dies after ``update`` updates: those since its last checkpoint."""
    return update % checkpoint_every if checkpoint_every > 0 else update


def check_faults(cfg: Any) -> None:
    """Raise ``ValueError`` (turned into a one-line spec error) for a fault that can't happen
    as written: an index out of range, a step or update past the end, too few restarts."""
    steps, workers, servers = cfg.steps, cfg.workers, cfg.servers
    kills: dict[str, int] = {}
    stragglers: set[int] = set()
    for i, f in enumerate(cfg.faults):
        where = f"faults[{i}] ({f.kind})"
        if isinstance(f, (KillWorker, Straggler)) and f.worker >= workers:
            raise ValueError(f"{where}: worker {f.worker} does not exist; workers are 0..{workers - 1}")
        if isinstance(f, KillWorker):
            if not 0 < f.step < steps:
                raise ValueError(f"{where}: step must be in 1..{steps - 1} (each worker runs {steps} steps), "
                                 f"got {f.step}")
            kills[f"worker {f.worker}"] = kills.get(f"worker {f.worker}", 0) + 1
        if isinstance(f, Straggler):
            if f.worker in stragglers:
                raise ValueError(f"{where}: worker {f.worker} already has a straggler fault; give one per worker")
            stragglers.add(f.worker)
            if f.from_step >= steps:
                raise ValueError(f"{where}: from_step must be < {steps} (each worker runs {steps} steps), "
                                 f"got {f.from_step}")
        if isinstance(f, KillServer):
            if f.shard >= servers:
                raise ValueError(f"{where}: shard {f.shard} does not exist; shards are 0..{servers - 1}")
            total = workers * steps
            if f.update >= total:
                raise ValueError(f"{where}: update must be in 1..{total - 1} (each shard applies workers x steps "
                                 f"= {total} updates), got {f.update}")
            if cfg.sync is SyncMode.SYNC:
                raise ValueError(f"{where}: kill_server needs sync 'async' or 'ssp': the 'sync' barrier counts "
                                 f"every update, and lost updates would never arrive")
            kills[f"shard {f.shard}"] = kills.get(f"shard {f.shard}", 0) + 1
    for actor, n in kills.items():
        if n > cfg.restarts:
            raise ValueError(f"{actor} is killed {n} time(s) but restarts is {cfg.restarts}; set restarts: {n} "
                             f"or more")
    points = [(f.kind, f.worker, f.step) if isinstance(f, KillWorker) else (f.kind, f.shard, f.update)
              for f in cfg.faults if not isinstance(f, Straggler)]
    if len(points) != len(set(points)):
        raise ValueError("the same kill is listed twice (same actor and step or update); give each once")
