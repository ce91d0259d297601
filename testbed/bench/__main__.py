"""``testbed bench`` (or ``python -m benchmarks`` in a checkout): run every figure, or those
named with ``--only``, write ``results.json`` into the output folder and print the table.

Where the results go: ``--out DIR`` (``DIR/results.json``, merged with what is there), by
default a new folder ``bench-results/<date>-<time>/`` in the current directory. The
checkout's committed figures (``benchmarks/results.json``) change only when asked, with
``--update-repo-results`` (or ``--out benchmarks`` from the checkout's top folder).

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

from testbed.bench.common import (
    RESULTS_NAME,
    default_out_dir,
    format_table,
    load_average,
    now_iso,
    repo_results_dir,
    write_results,
)

__all__ = ["FIGURES", "main", "run_figures", "results_path"]

# Figure name -> module (each has ``run(quick) -> Figure``), in the order of the figures'
# numbers (their titles and the README's benchmark table).
FIGURES = {
    "apply_bandwidth": "testbed.bench.apply_bandwidth",
    "disk_init": "testbed.bench.disk_init",
    "push_overhead": "testbed.bench.push_overhead",
    "timing_accuracy": "testbed.bench.timing_accuracy",
    "event_recording": "testbed.bench.event_recording",
    "scale": "testbed.bench.scale",
    "peer": "testbed.bench.peer",
    "simulate": "testbed.bench.simulate",
    "capacity": "testbed.bench.capacity",
    "setup": "testbed.bench.setup",
    "network": "testbed.bench.network",
}


class UsageError(Exception):
    """A bad option: one line naming it and the fix; exit code 2."""


def results_path(out: Optional[Path], update_repo_results: bool) -> Path:
    """The results file the options name: ``out/results.json``, the checkout's
    ``benchmarks/results.json`` (``update_repo_results``), else a new dated folder's."""
    if out is not None and update_repo_results:
        raise UsageError("--out and --update-repo-results name two places; give one")
    if update_repo_results:
        folder = repo_results_dir()
        if folder is None:
            raise UsageError("--update-repo-results: this testbed is not a source checkout (no benchmarks/"
                             "results.json beside it); give --out DIR instead")
        return folder / RESULTS_NAME
    if out is not None and (out.is_file() or out.suffix == ".json"):
        raise UsageError(f"--out {out}: give a folder (results.json is written inside it)")
    return (out if out is not None else default_out_dir()) / RESULTS_NAME


def run_figures(names: Sequence[str], quick: bool, out: Path) -> dict:
    """Run the named figures and merge them into the results file ``out``; returns the document.
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
    parser = argparse.ArgumentParser(prog="testbed bench", description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help=f"comma-separated figures: {', '.join(FIGURES)}")
    parser.add_argument("--quick", action="store_true", help="a short smoke version of each figure")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for results.json (default: a new bench-results/<date>-<time>/ here)")
    parser.add_argument("--update-repo-results", action="store_true",
                        help="write the source checkout's benchmarks/results.json (the committed figures)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(FIGURES)
    unknown = [n for n in names if n not in FIGURES]
    try:
        if unknown:
            raise UsageError(f"--only: unknown figure(s) {', '.join(unknown)}; choose from {', '.join(FIGURES)}")
        out = results_path(args.out, args.update_repo_results)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    doc = run_figures(names, args.quick, out)
    print()
    print(format_table([doc["figures"][n] for n in names if n in doc["figures"]]))
    run = doc["last_run"]
    print(f"\nload average {run['load_average_start']} -> {run['load_average_end']} on {run['versions']['cpu_count']} "
          f"cores; written: {out}")
    if doc["failed"]:
        print(f"failed: {', '.join(doc['failed'])}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
