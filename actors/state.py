"""What an actor leaves on disk to survive its own crash: small documents, written
atomically (``testbed.records.atomic``), so a reader finds the old one or the new one.

Two kinds, under the config's state folder (``<run folder>/state/<config>-r<repeat>/``
in a run; a restarted actor lands in its old bundle, so on its old node):

- ``<actor>.crash``: written by an actor just before a fault makes it exit: its events so
  far, where it stood, and when it crashed. Its restarted self reads it back.
- ``server-<i>.ckpt``: a shard's checkpoint, its parameters, version and per-worker counts.

No code from a run folder: a document is a NumPy ``.npz`` archive read with
``allow_pickle=False``. Arrays (``numpy.ndarray``, ``array.array``, ``bytes``) are stored as
arrays; everything else is JSON in the archive's ``doc`` entry, where an array is replaced
by ``{"__array__": name, "kind": ...}`` and a dictionary with non-string keys (per-worker
counts keyed by worker index) by ``{"__items__": [[key, value], ...]}``, so a document
comes back with the types it was saved with.
"""

from __future__ import annotations

import io
import json
import os
from array import array
from pathlib import Path
from typing import Any, Optional

import numpy as np

from testbed.records.atomic import atomic_write_bytes

__all__ = ["save_state", "load_state", "crash_path", "checkpoint_path", "encode_state", "decode_state"]


def crash_path(state_dir: str | os.PathLike, actor: str) -> Path:
    return Path(state_dir) / f"{actor}.crash"


def checkpoint_path(state_dir: str | os.PathLike, shard: int) -> Path:
    return Path(state_dir) / f"server-{shard}.ckpt"


def _encode(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(value, np.ndarray):
        name = f"a{len(arrays)}"
        arrays[name] = value
        return {"__array__": name, "kind": "ndarray"}
    if isinstance(value, array):
        name = f"a{len(arrays)}"
        arrays[name] = np.frombuffer(value.tobytes(), dtype=np.dtype(value.typecode)) if len(value) else \
            np.zeros(0, dtype=np.dtype(value.typecode))
        return {"__array__": name, "kind": f"array:{value.typecode}"}
    if isinstance(value, (bytes, bytearray)):
        name = f"a{len(arrays)}"
        arrays[name] = np.frombuffer(bytes(value), dtype=np.uint8)
        return {"__array__": name, "kind": "bytes"}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: _encode(v, arrays) for k, v in value.items()}
        return {"__items__": [[k, _encode(v, arrays)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return [_encode(v, arrays) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _decode(value: Any, arrays: Any) -> Any:
    if isinstance(value, dict):
        if "__array__" in value:
            data = arrays[value["__array__"]]
            kind = value["kind"]
            if kind == "bytes":
                return data.tobytes()
            if kind.startswith("array:"):
                out = array(kind.split(":", 1)[1])
                out.frombytes(data.tobytes())
                return out
            return data
        if "__items__" in value:
            return {k: _decode(v, arrays) for k, v in value["__items__"]}
        return {k: _decode(v, arrays) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, arrays) for v in value]
    return value


def encode_state(state: dict[str, Any]) -> bytes:
    arrays: dict[str, np.ndarray] = {}
    doc = json.dumps(_encode(state, arrays))
    buf = io.BytesIO()
    np.savez(buf, doc=np.frombuffer(doc.encode(), dtype=np.uint8), **arrays)
    return buf.getvalue()


def decode_state(data: bytes) -> dict[str, Any]:
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    return _decode(json.loads(arrays.pop("doc").tobytes().decode()), arrays)


def save_state(path: Path, state: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, encode_state(state))


def load_state(path: Path) -> Optional[dict[str, Any]]:
    """The document at ``path``, or None when there is none."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    return decode_state(data)
