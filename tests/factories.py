"""Builders shared by the tests: a hardware profile, a disk profile, run configs and an
event recorder, each small and valid, with any field changed by keyword.

A test module that needs other figures passes them (``profile(flops_per_s=1e9)``) or binds
them once (``functools.partial(factories.profile, ...)``), so when a record gains a required
field, this module is the one place to change.
"""

from __future__ import annotations

from typing import Any

from testbed.config.spec import ConfigFields, RunConfig, expand, parse_spec
from testbed.model.profile import DiskProfile, HardwareProfile
from testbed.records.events import EventRecorder

__all__ = ["MS", "disk", "profile", "run_config", "config_fields", "recorder"]

MS = 1e-3


def disk(seq_read_bytes_per_s: dict[int, float] | None = None, **fields: Any) -> DiskProfile:
    """A disk of 1, 1.5 and 2 MB/s with 1, 2 and 4 readers, 4 KiB blocks."""
    base: dict[str, Any] = {"block_bytes": 4096}
    base.update(fields)
    return DiskProfile(seq_read_bytes_per_s=seq_read_bytes_per_s or {1: 1e6, 2: 1.5e6, 4: 2e6}, **base)


def profile(**fields: Any) -> HardwareProfile:
    """A 2-core machine where every call costs 1 ms and every byte rate is 1 MB/s (round
    numbers a test can recompute by hand), with ``disk()``."""
    base: dict[str, Any] = dict(identity={}, cores_per_node=2, server_apply_bytes_per_s=1e6,
                                server_call_overhead_s=MS, actor_call_latency_s=MS, transfer_bytes_per_s_local=1e6,
                                disk=disk())
    base.update(fields)
    return HardwareProfile(**base)


def run_config(**fields: Any) -> RunConfig:
    """A small validated run config (6 steps, 1 ms compute, 4 KiB gradients) with ``fields`` changed."""
    base: dict[str, Any] = {"name": "t", "workload": {"steps": 6}, "compute": {"seconds": "1ms"},
                            "gradient_bytes": "4KiB"}
    base.update(fields)
    return expand(parse_spec(base))[0]


def config_fields(**fields: Any) -> ConfigFields:
    """The model's input without a spec around it: 100 steps of 10 ms compute, 1000-byte gradients."""
    base: dict[str, Any] = {"gradient_bytes": 1000, "compute": {"seconds": 0.01}, "workload": {"steps": 100}}
    base.update(fields)
    return ConfigFields.model_validate(base)


def recorder(actor: str, role: str, **clocks: Any) -> EventRecorder:
    """An event recorder for one actor of run r, config c, repeat 0; ``clocks``: ``wall_ns``
    and ``mono_ns`` to replace the real clocks (a test that must be exact on a loaded machine)."""
    return EventRecorder(run_id="r", config_id="c", repeat=0, actor=actor, role=role, **clocks)
