"""Figure 2: the testbed's init reads against fio's sequential reads of the same file
(same directory, block size, ``direct=1``); ``testbed.bench.disk_init_vs_fio`` has the method.
Target: testbed/fio >= 0.9 (median over repeats of the ratio within one repeat)."""

from __future__ import annotations

import os
import shutil

from testbed.bench.common import Check, Figure, load_average, now_iso
from testbed.bench.disk_init_vs_fio import TARGET_RATIO, measure
from testbed.config.spec import DEFAULT_DATA_DIR

__all__ = ["run", "DEFAULT_DIR"]

DEFAULT_DIR = os.path.join(os.path.dirname(DEFAULT_DATA_DIR), "bench-disk")


def run(quick: bool = False, directory: str = DEFAULT_DIR) -> Figure:
    load, date = load_average(), now_iso()
    dataset = (128 if quick else 256) * 2**20
    raw, data_dir = measure(os.path.expanduser(directory), dataset, 2**20, 3 if quick else 9)
    shutil.rmtree(data_dir, ignore_errors=True)
    raw.pop("benchmark", None)
    checks = (Check("init read/fio", raw["ratio_testbed_over_fio"], TARGET_RATIO, ">="),)
    return Figure("disk_init", "2. init reads vs fio sequential reads (direct=1)", checks, raw, load, date,
                  note=f"{raw['fs_type']}, block 1 MiB, {dataset >> 20} MiB read per repeat, "
                  f"cache bypass {raw['cache_bypass']}", quick=quick)
