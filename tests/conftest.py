"""Shared fixtures. Integration modules start Ray once per module through ``ray_local``."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ray_local():
    """A small local Ray for one test module, started as the testbed starts it
    (``ray_session``): 2 CPUs, a bounded object store, fresh, shut down after."""
    from testbed.runner.cluster import ray_session

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    # "local": always a fresh instance, never RAY_ADDRESS or a cluster someone else started here
    with ray_session("local", num_cpus=2, object_store_bytes=200 * 2**20, fresh=True,
                     logging_level=logging.ERROR) as ray:
        yield ray


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """Profiles cached in a folder of the test module's own, not the user's."""
    path = tmp_path_factory.mktemp("cache")
    old = os.environ.get("TESTBED_CACHE_DIR")
    os.environ["TESTBED_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        del os.environ["TESTBED_CACHE_DIR"]
    else:
        os.environ["TESTBED_CACHE_DIR"] = old


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
