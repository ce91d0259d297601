"""The shard's update kernel: ``w -= lr * g`` in place, in cache-sized chunks.

One kernel, called by the parameter-server shard (``actors.server``) for every push and by
the apply-bandwidth benchmark (``testbed.bench.apply_bandwidth``) as its baseline, so the
benchmark measures exactly the code a run executes.

Why chunks: ``np.subtract(w, lr * g, out=w)`` allocates a temporary as large as ``g`` and
streams memory twice. Scaling one chunk of ``g`` into a small reused scratch and
subtracting it while the chunk is still in cache allocates nothing and reads ``g`` once;
``g`` is only read, so a read-only array (as Ray hands over) is fine.
"""

from __future__ import annotations

import numpy as np

__all__ = ["APPLY_CHUNK_ELEMENTS", "apply_scratch", "apply_in_place"]

# Elements per chunk: 256 KiB of float32, so a chunk of g, w and the scratch fit in L2.
APPLY_CHUNK_ELEMENTS = 1 << 16


def apply_scratch(elements: int) -> np.ndarray:
    """The scratch ``apply_in_place`` needs for a parameter vector of ``elements`` values
    (allocate once, reuse for every update)."""
    return np.empty(min(elements, APPLY_CHUNK_ELEMENTS), dtype=np.float32)


def apply_in_place(w: np.ndarray, grad: np.ndarray, learning_rate: np.float32, scratch: np.ndarray) -> None:
    """``w -= learning_rate * grad`` in place, without allocating and without copying ``grad``."""
    for lo in range(0, w.size, APPLY_CHUNK_ELEMENTS):
        hi = min(lo + APPLY_CHUNK_ELEMENTS, w.size)
        part = scratch[: hi - lo]
        np.multiply(grad[lo:hi], learning_rate, out=part)
        np.subtract(w[lo:hi], part, out=w[lo:hi])
