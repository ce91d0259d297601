"""Resource checks before anything runs: memory for the parameters and gradients of every
actor, the matmul buffers, the timing events and the object store, the object store's own
capacity, and disk for the data set. Pure arithmetic; the caller passes in what the machine
has, so the refusal names the numbers."""

from __future__ import annotations

from typing import Callable, Iterable

from testbed.config.errors import UserError
from testbed.config.spec import ComputeMode, RunConfig, StepReads, SyncMode
from testbed.config.units import format_bytes
from testbed.emulation.compute import matmul_size

__all__ = ["config_memory_bytes", "matmul_buffer_bytes", "events_per_config", "events_memory_bytes",
           "object_store_bytes_needed", "check_memory", "check_object_store", "check_disk",
           "EVENT_BYTES_HELD", "EVENT_BYTES_COLLECTED", "EVENT_BYTES_SUMMARY"]

# Fraction of the available memory a run may plan to use; the rest is for Ray, Python and the OS.
MEMORY_HEADROOM = 0.7

# Bytes one timing event costs, where it is held:
# - in its actor until the config ends (the recorder's arrays: a 1-byte phase and five 8-byte fields);
# - in the driver while it collects and writes one config: the exports, the plain columns, the
#   Arrow table and the parquet bytes side by side (530 B, measured from the process's RSS over
#   2 M events with Ray's 56-character node ids);
# - in the driver for the summary, which reads every config's events back into one frame after
#   each config (parquet read back plus the pandas frame: 230 B, measured the same way).
EVENT_BYTES_HELD = 41
EVENT_BYTES_COLLECTED = 530
EVENT_BYTES_SUMMARY = 230

# Events outside the step loop: setup, init reads, gate waits, restarts; a few per actor.
_FIXED_EVENTS_PER_ACTOR = 8


def matmul_buffer_bytes(cfg: RunConfig) -> int:
    """The three n x n float32 matrices each worker allocates for ``matmul`` compute, in all."""
    if cfg.compute.mode is not ComputeMode.MATMUL:
        return 0
    n = matmul_size(cfg.compute.flops)
    return 3 * n * n * 4 * cfg.workers


def config_memory_bytes(cfg: RunConfig) -> int:
    """Resident bytes the actors of one config hold: each shard its parameters and a scratch
    buffer (2 G in all) and its replies' buffers (``sync``: two round snapshots, 2 G; else one
    per thread that has pulled: up to N + 4, the shard's threads, G each), each worker a base
    gradient, a step buffer and the pulled parameters (3 G), and its matmul buffers."""
    g = cfg.gradient_bytes
    replies = 2 * g if cfg.sync is SyncMode.SYNC else (cfg.workers + 4) * g
    return 2 * g + replies + 3 * g * cfg.workers + matmul_buffer_bytes(cfg)


def events_per_config(cfg: RunConfig) -> int:
    """Timing events one config repeat records, by role. A worker, per step: compute and push,
    a read with step reads, a pull every ``pull_every`` steps (every step in ``sync``) and a
    barrier in ``sync`` and ``ssp``. A shard, per update (one per worker per step): queue and
    apply, and a checkpoint every ``checkpoint_every`` updates."""
    steps, w, s = cfg.steps, cfg.workers, cfg.servers
    per_worker = 2 * steps
    if cfg.data.step_reads is not StepReads.NONE and cfg.workload.dataset_bytes > 0:
        per_worker += steps
    if cfg.sync is SyncMode.SYNC:
        per_worker += 2 * steps
    else:
        per_worker += steps // cfg.pull_every
        if cfg.sync is SyncMode.SSP:
            per_worker += steps - 1
    updates = w * steps  # per shard
    per_shard = 2 * updates + (updates // cfg.checkpoint_every if cfg.checkpoint_every else 0)
    return w * per_worker + s * per_shard + _FIXED_EVENTS_PER_ACTOR * (w + s + 1)


def events_memory_bytes(cfg: RunConfig) -> int:
    """Bytes one config repeat's events take while it runs and is written: in the actors and,
    collected, in the driver."""
    return events_per_config(cfg) * (EVENT_BYTES_HELD + EVENT_BYTES_COLLECTED)


def object_store_bytes_needed(cfg: RunConfig) -> int:
    """Bytes in flight in the object store at worst: every worker's push and pull at once."""
    return 2 * cfg.gradient_bytes * cfg.workers


def check_memory(configs: Iterable[RunConfig], available_bytes: int, repeats: int = 1) -> None:
    """Refuse a config whose actors, events and gradients in flight do not fit the memory a
    run may use, and a run whose events (``repeats`` of each config) do not fit it at once
    when the summary reads them back."""
    budget = int(available_bytes * MEMORY_HEADROOM)
    of = f"{MEMORY_HEADROOM:.0%} of {format_bytes(available_bytes)} available"
    configs = list(configs)
    for cfg in configs:
        parts = {"gradients": config_memory_bytes(cfg) - matmul_buffer_bytes(cfg) + object_store_bytes_needed(cfg),
                 "matmul buffers": matmul_buffer_bytes(cfg), "events": events_memory_bytes(cfg)}
        need = sum(parts.values())
        if need > budget:
            largest = max(parts, key=parts.__getitem__)
            fix = {"gradients": "lower gradient_bytes or workers",
                   "matmul buffers": "lower compute.flops or workers",
                   "events": "lower workload.steps (or workload.epochs) or workers"}[largest]
            shown = ", ".join(f"{name} {format_bytes(b)}" for name, b in parts.items() if b)
            raise UserError(
                f"config {cfg.config_id} (workers={cfg.workers}, gradient_bytes={format_bytes(cfg.gradient_bytes)}, "
                f"{cfg.steps} steps) needs about {format_bytes(need)} of memory ({shown}; "
                f"{events_per_config(cfg)} events) but only {format_bytes(budget)} may be used ({of}); {fix}")
    events = sum(events_per_config(cfg) for cfg in configs) * repeats
    need = events * EVENT_BYTES_SUMMARY
    if need > budget:
        raise UserError(
            f"the run records about {events} events ({len(configs)} configs x {repeats} repeats), and its summary "
            f"reads them back at once: about {format_bytes(need)} of memory, but only {format_bytes(budget)} may be "
            f"used ({of}); lower workload.steps, repeats or the number of sweep points")


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
