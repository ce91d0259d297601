"""What an actor leaves on disk to survive its own crash: small pickled documents, written
atomically (temporary file, fsync, rename), so a reader finds the old one or the new one.

Two kinds, under the config's state folder (``<run folder>/state/<config>-r<repeat>/``
in a run; a restarted actor lands in its old bundle, so on its old node):

- ``<actor>.crash``: written by an actor just before a fault makes it exit: its events so
  far, where it stood, and when it crashed. Its restarted self reads it back.
- ``server-<i>.ckpt``: a shard's checkpoint, its parameters, version and per-worker counts.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any, Optional

__all__ = ["save_state", "load_state", "crash_path", "checkpoint_path"]


def crash_path(state_dir: str | os.PathLike, actor: str) -> Path:
    return Path(state_dir) / f"{actor}.crash"


def checkpoint_path(state_dir: str | os.PathLike, shard: int) -> Path:
    return Path(state_dir) / f"server-{shard}.ckpt"


def save_state(path: Path, state: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_state(path: Path) -> Optional[dict[str, Any]]:
    """The document at ``path``, or None when there is none."""
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        return None
