"""One writer per run folder: an exclusive lock held for the whole run.

The lock is ``.lock`` inside the folder, an advisory ``flock`` through ``filelock``: the
kernel drops it when its process dies, however it dies (``kill -9`` included), so a held
lock means a live writer and a free lock on a folder marked ``running`` means its writer is
gone (``interrupted``). The owner (host, pid, start) is written in the manifest, not in the
lock file (a second contender opening the lock file would truncate it).

On a file system without working ``flock`` (some network mounts) ``filelock`` falls back to
a soft lock; the owner's pid is then checked too when the owner is on this host.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Optional

import psutil
from filelock import FileLock, Timeout

__all__ = ["LOCK_FILE", "FolderLock", "FolderBusy", "lock_is_free", "owner_alive"]

LOCK_FILE = ".lock"


class FolderBusy(Exception):
    """Another process holds the folder's lock (the caller names the owner)."""


class FolderLock:
    """The exclusive lock of one run folder (``acquire`` refuses at once rather than wait)."""

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / LOCK_FILE
        self._lock = FileLock(str(self.path), timeout=0, is_singleton=False)

    def acquire(self) -> None:
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            raise FolderBusy(str(self.path)) from None

    def release(self) -> None:
        if self._lock.is_locked:
            self._lock.release(force=True)

    @property
    def held(self) -> bool:
        return self._lock.is_locked


def lock_is_free(folder: Path) -> Optional[bool]:
    """Whether nobody holds ``folder``'s lock (True), somebody does (False), or it cannot be
    told (None: no lock file, or the folder is read-only)."""
    path = Path(folder) / LOCK_FILE
    if not path.exists():
        return None
    probe = FileLock(str(path), timeout=0, is_singleton=False)
    try:
        probe.acquire(timeout=0)
    except Timeout:
        return False
    except OSError:
        return None
    probe.release(force=True)
    return True


def owner_alive(host: str, pid: int) -> Optional[bool]:
    """Whether the process ``pid`` on ``host`` runs; None when ``host`` is another machine."""
    if host != socket.gethostname():
        return None
    if pid == os.getpid():
        return True
    return psutil.pid_exists(pid)
