"""Resource checks before anything runs: memory for the parameters and gradients of every
actor and for the object store. Pure arithmetic; the caller passes in what the machine has,
so the refusal names the numbers."""

from __future__ import annotations

from typing import Iterable

from testbed.errors import UserError
from testbed.spec import RunConfig, SyncMode
from testbed.units import format_bytes

__all__ = ["config_memory_bytes", "object_store_bytes_needed", "check_memory"]

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
