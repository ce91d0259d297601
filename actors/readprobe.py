"""The step-read probe: one actor reads minibatches the way a worker reads its step input,
with a pause between reads like a step's compute, and times each read.

A worker's step read comes after the rest of the previous step (its compute, 5 to 100 ms,
then the push and the pull), not right after another read. On a virtual disk, and with a
CPU that dozes off in the pause, a direct read after a pause costs several times one in a
tight loop (docs/model.md, "Step reads"), so the model's read term is calibrated here, in
an actor, with pauses, on the same reader the workers use (``StepReader`` over a
``DirectReader``).
"""

from __future__ import annotations

import time

import numpy as np

from testbed.emulation.compute import spin

__all__ = ["ReadProbe", "PAUSE_KINDS"]

PAUSE_KINDS = ("sleep", "spin")


class ReadProbe:
    """An actor that times step reads after pauses on this node (``sweep_s``)."""

    def sweep_s(self, directory: str, file_bytes: int, hot_cells: list[tuple],
                paused_cells: list[tuple[str, int, float]], hot_repeats: int, rounds: int, block_bytes: int = 2**20,
                cache_bypass: bool = True, pause_kind: str = "sleep",
                passes: int = 2) -> tuple[list[list[float]], list[list[float]], str]:
        """Seconds of single reads from a file of ``file_bytes`` written in ``directory`` (as a
        data-set file: synced, dropped from the page cache) and removed afterwards:

        - for each hot cell ``(order, bytes)`` or ``(order, bytes, minibatch)``, ``hot_repeats``
          step reads (of one sample, or of ``minibatch``) back to back (a stream, as the samples
          of a random minibatch follow each other), in ``passes`` runs over the cells in turn;
        - for each paused cell ``(order, bytes, pause_s)``, ``rounds`` reads, each after its
          pause, in runs of ``rounds / passes`` in a row, as a worker's steps come. Each run's
          first two reads are left out; the passes go over the cells in turn, forwards then
          backwards, so that a burst of load elsewhere on the machine falls on several cells.

        Also returns how the file was read (``DirectReader.mode``: ``o_direct``, ``fadvise``
        or ``cached``)."""
        import os
        from pathlib import Path

        from testbed.data.dataset import write_random_file
        from testbed.data.diskio import DirectReader, StepReader

        if pause_kind not in PAUSE_KINDS:
            raise ValueError(f"pause_kind must be one of {PAUSE_KINDS}, got {pause_kind!r}")
        pause = time.sleep if pause_kind == "sleep" else spin
        path = Path(directory) / f".calibrate-reads-{os.getpid()}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        readers: dict[tuple[str, int, int], StepReader] = {}
        mode = "o_direct" if cache_bypass else "cached"
        clock = time.perf_counter
        try:
            write_random_file(path, file_bytes, seed=file_bytes + 1)
            hot_keys = [(str(c[0]), int(c[1]), int(c[2]) if len(c) > 2 else 1) for c in hot_cells]
            for key in [*hot_keys, *((o, n, 1) for o, n, _ in paused_cells)]:
                if key not in readers:
                    order, nbytes, minibatch = key
                    direct = DirectReader(block_bytes, cache_bypass)
                    readers[key] = StepReader([(str(path), file_bytes)], nbytes, minibatch, order,
                                              np.random.default_rng([len(readers), nbytes, minibatch]), direct)
                    readers[key].read_step()  # opens the file, touches the buffer
                    mode = direct.mode
            hot: list[list[float]] = [[] for _ in hot_keys]
            for n in range(passes):
                per_hot = hot_repeats // passes + (n < hot_repeats % passes)
                order_of_keys = list(enumerate(hot_keys))
                for k, key in order_of_keys[::-1] if n % 2 else order_of_keys:
                    reader, xs = readers[key], []
                    for _ in range(per_hot + 2 if per_hot else 0):
                        t0 = clock()
                        reader.read_step()
                        xs.append(clock() - t0)
                    hot[k] += xs[2:]  # the stream's first reads come after whatever came before
            paused: list[list[float]] = [[] for _ in paused_cells]
            per_run = max(1, -(-rounds // passes))
            for n in range(passes):
                order_of_cells = list(enumerate(paused_cells))
                for k, (order, nbytes, pause_s) in order_of_cells[::-1] if n % 2 else order_of_cells:
                    reader = readers[order, nbytes, 1]
                    for i in range(per_run + 2):
                        pause(pause_s)
                        t0 = clock()
                        reader.read_step()
                        if i >= 2:
                            paused[k].append(clock() - t0)
            return hot, paused, mode
        finally:
            for r in readers.values():
                r.close()
            path.unlink(missing_ok=True)
