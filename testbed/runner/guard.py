"""Resource checks before anything runs: memory for the parameters and gradients of every
actor and for the object store, the object store's own capacity, and disk for the data set.
Pure arithmetic; the caller passes in what the machine has, so the refusal names the numbers."""

from __future__ import annotations

from typing import Callable, Iterable

from testbed.config.errors import UserError
from testbed.config.spec import RunConfig, SyncMode
from testbed.config.units import format_bytes

__all__ = ["config_memory_bytes", "object_store_bytes_needed", "check_memory", "check_object_store", "check_disk"]

# Fraction of the available memory a run may plan to use; the rest is for Ray, Python and the OS.
MEMORY_HEADROOM = 0.7


def config_memory_bytes(cfg: RunConfig) -> int:
    """Resident bytes the actors of one config hold: each shard its parameters and a scratch
    buffer (2 G in all; 3 G in ``sync``, which keeps a snapshot for the pulls), each worker a
    base gradient, a step buffer and the pulled parameters (3 G)."""
    g = cfg.gradient_bytes
    shards = 3 * g if cfg.sync is SyncMode.SYNC else 2 * g
    return shards + 3 * g * cfg.workers


def object_store_bytes_needed(cfg: RunConfig) -> int:
    """Bytes in flight in the object store at worst: every worker's push and pull at once."""
    return 2 * cfg.gradient_bytes * cfg.workers


def check_memory(configs: Iterable[RunConfig], available_bytes: int) -> None:
    budget = int(available_bytes * MEMORY_HEADROOM)
    for cfg in configs:
        need = config_memory_bytes(cfg) + object_store_bytes_needed(cfg)
        if need > budget:
            raise UserError(
                f"config {cfg.config_id} (workers={cfg.workers}, gradient_bytes={format_bytes(cfg.gradient_bytes)}) "
                f"needs about {format_bytes(need)} of memory but only {format_bytes(budget)} may be used "
                f"({MEMORY_HEADROOM:.0%} of {format_bytes(available_bytes)} available); "
                f"lower gradient_bytes or workers")


def check_object_store(configs: Iterable[RunConfig], store_bytes: int) -> None:
    """Refuse a config whose gradients in flight do not fit the object store (``store_bytes``,
    the smallest node's; 0 when unknown, which skips the check)."""
    if store_bytes <= 0:
        return
    for cfg in configs:
        need = object_store_bytes_needed(cfg)
        if need > store_bytes:
            raise UserError(
                f"config {cfg.config_id} (workers={cfg.workers}, gradient_bytes={format_bytes(cfg.gradient_bytes)}) "
                f"may hold {format_bytes(need)} in Ray's object store at once, but the store holds "
                f"{format_bytes(store_bytes)}; lower gradient_bytes or workers, or start Ray with a larger "
                f"--object-store-memory")


def check_disk(configs: Iterable[RunConfig], free_bytes: Callable[[str], int],
               present_bytes: Callable[[RunConfig], int] = lambda cfg: 0) -> None:
    """Refuse when a data directory's disk cannot hold the data sets meant for it.

    ``free_bytes(directory)`` is the free space there, ``present_bytes(cfg)`` how much of the
    config's data set is already written (reused, not written again). Data sets of different
    shapes in one directory are separate files, so they add up."""
    shapes: dict[str, dict[tuple[int, int], int]] = {}
    for cfg in configs:
        if cfg.workload.dataset_bytes > 0:
            shape = (cfg.workload.dataset_bytes, cfg.data.file_bytes)
            missing = max(0, cfg.workload.dataset_bytes - present_bytes(cfg))
            shapes.setdefault(cfg.data.dir, {})[shape] = missing
    for directory, missing in shapes.items():
        need, free = sum(missing.values()), free_bytes(directory)
        if need > free:
            raise UserError(
                f"the data set(s) for {directory} need {format_bytes(need)} ({need} bytes) more but its disk has "
                f"{format_bytes(free)} ({free} bytes) free; free some space, set data.dir to a larger disk, "
                f"or lower workload.dataset_bytes")
