"""The testbed's init read throughput against fio's sequential read of the very same file.

A one-file data set (``prepare_dataset``, so the bytes a worker reads) is read start to end,
interleaved, ``--repeats`` times, alternating which goes first:

- *testbed*: ``DirectReader(block).read_plan(init_read_plan(..., "full"))``, timed as the
  worker times its ``init_read`` phase (reader creation included);
- *fio*: ``--rw=read --bs=<block> --direct=1 --ioengine=psync --numjobs=1`` over the same file,
  read once; its own bandwidth figure (which excludes fio's start-up);
- *bare*: a naive ``os.preadv`` loop with O_DIRECT into ``mmap.mmap(-1, block)`` (shared
  anonymous memory, 4 KiB pages): the reader as it was before it got its huge-page buffer.
  On virtio disks each page of the buffer is a segment of the request, and the per-segment
  cost halves the throughput; fio's malloc'd buffer is contiguous or not by luck, which is
  why fio's figure swings between runs.

All bypass the page cache, so every repeat reads the disk. On a shared machine the disk's
speed drifts by 2x within seconds, so the headline figure is the median over repeats of the
ratio within one repeat (the arms of a repeat run back to back, in rotating order), with
the ratio of the medians beside it. Target: testbed/fio >= 0.9.

Run: ``python -m testbed.bench.disk_init_vs_fio [--dir DIR] [--out FILE]`` (writes
``bench-results/<date>-<time>/disk_init_vs_fio.json`` in the current directory unless
``--out`` says where, e.g. the checkout's ``benchmarks/results/disk_init_vs_fio.json``; the
data set is removed afterwards unless ``--keep``).
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import statistics
import time
from pathlib import Path

from testbed.bench.common import default_out_dir
from testbed.config.spec import DEFAULT_DATA_DIR, Data
from testbed.config.units import parse_bytes
from testbed.data.dataset import prepare_dataset
from testbed.data.diskio import DirectReader, init_read_plan
from testbed.data.fio import FioJob, FioResult, build_command, find_fio, parse_fio_json, run_fio
from testbed.records.atomic import atomic_write_text

RESULTS_NAME = "disk_init_vs_fio.json"
TARGET_RATIO = 0.9


def testbed_read(files: tuple, dataset_bytes: int, block_bytes: int) -> float:
    """Bytes per second of one full init read, as a worker does it."""
    t0 = time.perf_counter()
    with DirectReader(block_bytes) as reader:
        got = reader.read_plan(init_read_plan(files, dataset_bytes, 0, 1, "full"))
    elapsed = time.perf_counter() - t0
    assert got == dataset_bytes, (got, dataset_bytes)
    return got / elapsed


def bare_read(path: str, dataset_bytes: int, block_bytes: int) -> float:
    """Bytes per second of the simplest O_DIRECT loop Python can run (4 KiB-page buffer)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, block_bytes)
    try:
        t0 = time.perf_counter()
        pos = 0
        while pos < dataset_bytes:
            pos += os.preadv(fd, [buf], pos)
        return pos / (time.perf_counter() - t0)
    finally:
        buf.close()
        os.close(fd)


def fio_read(fio: str, directory: str, filename: str, dataset_bytes: int, block_bytes: int) -> FioResult:
    job = FioJob("seqread", "read", block_bytes, filename, dataset_bytes, runtime_s=600, time_based=False)
    result = parse_fio_json(run_fio(build_command(job, fio), directory, timeout_s=660))
    assert result.read_bytes == dataset_bytes, (result.read_bytes, dataset_bytes)
    return result


def measure(directory: str, dataset_bytes: int, block_bytes: int, repeats: int) -> tuple[dict, str]:
    fio = find_fio()
    data = Data(dir=directory, file_bytes=dataset_bytes, block_bytes=block_bytes)
    info = prepare_dataset(data, dataset_bytes, progress=print)
    (path, _), = info.files
    arms = ("testbed", "fio", "bare")
    speeds: dict[str, list[float]] = {arm: [] for arm in arms}
    version = ""
    load_before = os.getloadavg()
    for rep in range(repeats):
        for who in arms[rep % 3:] + arms[:rep % 3]:  # each arm goes first, second, third in turn
            if who == "testbed":
                speeds[who].append(testbed_read(info.files, dataset_bytes, block_bytes))
            elif who == "bare":
                speeds[who].append(bare_read(path, dataset_bytes, block_bytes))
            else:
                result = fio_read(fio, info.directory, os.path.basename(path), dataset_bytes, block_bytes)
                speeds[who].append(result.read_bytes_per_s)
                version = result.fio_version
        print(f"repeat {rep:2d}: " + "   ".join(f"{a} {speeds[a][-1] / 2**20:6.0f} MiB/s" for a in arms))
    med = {arm: statistics.median(v) for arm, v in speeds.items()}

    def paired(a: str, b: str) -> list[float]:
        return [x / y for x, y in zip(speeds[a], speeds[b])]
    headline = statistics.median(paired("testbed", "fio"))
    return {
        "benchmark": "disk_init_vs_fio",
        "dataset_bytes": dataset_bytes, "block_bytes": block_bytes, "repeats": repeats,
        "fs_type": info.fs_type, "cache_bypass": info.cache_bypass, "fio_version": version,
        "cpu_count": os.cpu_count(), "load_average_before": load_before, "load_average_after": os.getloadavg(),
        **{f"{arm}_read_bytes_per_s": v for arm, v in speeds.items()},
        **{f"{arm}_median_bytes_per_s": v for arm, v in med.items()},
        "ratio_testbed_over_fio": headline,
        "ratio_testbed_over_fio_quartiles": statistics.quantiles(paired("testbed", "fio"), n=4),
        "ratio_of_medians_testbed_over_fio": med["testbed"] / med["fio"],
        "ratio_testbed_over_bare": statistics.median(paired("testbed", "bare")),
        "ratio_bare_over_fio": statistics.median(paired("bare", "fio")),
        "target_ratio": TARGET_RATIO, "meets_target": headline >= TARGET_RATIO,
    }, info.directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=os.path.join(os.path.dirname(DEFAULT_DATA_DIR), "bench-disk"),
                        help="where to write the data set (a real disk; default: under the user's cache dir)")
    parser.add_argument("--dataset-bytes", default="512MiB")
    parser.add_argument("--block-bytes", default="1MiB")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--keep", action="store_true", help="keep the data set for the next run")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"result file (default: bench-results/<date>-<time>/{RESULTS_NAME} here)")
    args = parser.parse_args()
    out = args.out if args.out is not None else default_out_dir() / RESULTS_NAME
    result, data_dir = measure(os.path.expanduser(args.dir), parse_bytes(args.dataset_bytes),
                               parse_bytes(args.block_bytes), args.repeats)
    if not args.keep:
        shutil.rmtree(data_dir)
    result["data_dir_removed"] = not args.keep
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(result, indent=2) + "\n")
    print(f"medians: testbed {result['testbed_median_bytes_per_s'] / 2**20:.0f} MiB/s, "
          f"fio {result['fio_median_bytes_per_s'] / 2**20:.0f} MiB/s, bare {result['bare_median_bytes_per_s'] / 2**20:.0f} MiB/s")
    print(f"testbed/fio {result['ratio_testbed_over_fio']:.3f} (median of per-repeat ratios; target >= {TARGET_RATIO}), "
          f"ratio of medians {result['ratio_of_medians_testbed_over_fio']:.3f}, "
          f"testbed/bare {result['ratio_testbed_over_bare']:.3f}")
    print(f"written: {out}")


if __name__ == "__main__":
    main()
