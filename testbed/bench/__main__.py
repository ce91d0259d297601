"""``python -m benchmarks`` (or ``testbed bench``): run every figure, or those named with
``--only``, write ``benchmarks/results.json`` and print the table.

Figures run one after another, each on its own fresh local Ray (2 CPUs), so none inherits
another's processes; within a figure the compared arms are interleaved. ``--quick`` runs a
short smoke version of each (minutes, not a quarter of an hour); its entries say so.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from pathlib import Path
from typing import Optional, Sequence

from testbed.bench.common import RESULTS_FILE, format_table, load_average, now_iso, write_results

__all__ = ["FIGURES", "main", "run_figures"]

# Figure name -> module (each has ``run(quick) -> Figure``), in the order.
FIGURES = {
    "apply_bandwidth": "testbed.bench.apply_bandwidth",
    "disk_init": "testbed.bench.disk_init",
    "push_overhead": "testbed.bench.push_overhead",
    "timing_accuracy": "testbed.bench.timing_accuracy",
    "event_recording": "testbed.bench.event_recording",
    "scale": "testbed.bench.scale",
    "peer": "testbed.bench.peer",
    "capacity": "testbed.bench.capacity",
    "setup": "testbed.bench.setup",
}


def run_figures(names: Sequence[str], quick: bool, out: Path = RESULTS_FILE) -> dict:
    """Run the named figures and merge them into the results file; returns the document.
    A figure that fails is reported and the others still run; the exit code says so."""
    started, load = now_iso(), load_average()
    figures, failed = [], []
    for name in names:
        print(f"== {name} (load {load_average()[0]:.1f})", flush=True)
        try:
            figures.append(importlib.import_module(FIGURES[name]).run(quick=quick))
        except Exception:  # noqa: BLE001 - one broken figure must not hide the others
            traceback.print_exc()
            failed.append(name)
    doc = write_results(figures, out, started=started, load_start=load, quick=quick)
    doc["failed"] = failed
    return doc


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help=f"comma-separated figures: {', '.join(FIGURES)}")
    parser.add_argument("--quick", action="store_true", help="a short smoke version of each figure")
    parser.add_argument("--out", type=Path, default=RESULTS_FILE, help="results file (JSON)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(FIGURES)
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        print(f"error: unknown figure(s) {', '.join(unknown)}; choose from {', '.join(FIGURES)}", file=sys.stderr)
        return 2
    doc = run_figures(names, args.quick, args.out)
    print()
    print(format_table([doc["figures"][n] for n in names if n in doc["figures"]]))
    run = doc["last_run"]
    print(f"\nload average {run['load_average_start']} -> {run['load_average_end']} on {run['versions']['cpu_count']} "
          f"cores; written: {args.out}")
    if doc["failed"]:
        print(f"failed: {', '.join(doc['failed'])}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
