"""Shared fixtures. Integration modules start Ray once per module through ``ray_local``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ray_local():
    """A small local Ray for one test module: 2 CPUs, a bounded object store, shut down after."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    # address="local": always a fresh instance, never a cluster someone else started on this machine
    ray.init(address="local", num_cpus=2, object_store_memory=200 * 2**20, include_dashboard=False,
             log_to_driver=False, logging_level="ERROR")
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def no_o_direct(monkeypatch):
    """A file system that refuses O_DIRECT (EINVAL at open), as tmpfs and some others do."""
    import errno

    from testbed.data import diskio
    real_open = os.open

    def refusing_open(path, flags, *args):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args)
    monkeypatch.setattr(diskio.os, "open", refusing_open)
