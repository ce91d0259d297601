"""The one way the testbed writes a file: whole or not at all, and still there after a crash.

``atomic_write_bytes`` writes a temporary file beside the target, fsyncs it, renames it over
the target and fsyncs the folder (without the last step a power cut can lose the rename
itself, leaving the old file or none). A reader sees the old file or the new one, never half.

``append_line`` is the one exception to "whole files": the run folder's journal
(``finished.jsonl``) grows by one line per config, fsynced, so a config's bookkeeping costs
the same with 10 or 10,000 configs done. A line cut short by a kill is ignored by its reader.

Temporary files are named ``.<name>.tmp-<pid>``, so a resumed writer knows what to remove.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from testbed.config.errors import UserError

__all__ = ["atomic_write_bytes", "atomic_write_text", "append_line", "fsync_dir", "TMP_GLOB"]

TMP_GLOB = ".*.tmp-*"  # what a killed writer may leave behind


def fsync_dir(path: Path) -> None:
    """Make a rename (or a new file) in ``path`` durable; silently skipped where folders
    cannot be opened (some network file systems)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically and durably; a full disk or a read-only folder
    is a ``UserError`` that names the file, and leaves the old file in place."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise UserError(f"cannot write {path}: {err.strerror or err}; free some space or choose another --out") from None
    fsync_dir(path.parent)
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode())


def append_line(path: str | os.PathLike, line: str) -> None:
    """Append one line (no newline inside) and fsync it: the journal's one write per config."""
    path = Path(path)
    if "\n" in line:
        raise ValueError("a journal line cannot hold a newline")
    new = not path.exists()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as err:
        raise UserError(f"cannot write {path}: {err.strerror or err}; free some space or choose another --out") from None
    if new:
        fsync_dir(path.parent)
