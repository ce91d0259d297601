"""What the subcommands share: the two consoles, the progress bar, the summary table,
and the parsing of options that several commands take."""

from __future__ import annotations

import os
import sys
from typing import Optional

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from testbed.config.errors import UserError
from testbed.config.units import format_bytes

__all__ = ["out_console", "err_console", "progress_bar", "summary_table", "parse_interval", "say_problems",
           "EXIT_CONFIGS_TROUBLED", "exit_for_troubled"]

# `testbed run` and `testbed validate` exit with this when the run completed but some config
# repeat failed or timed out (its warning line says which): a script can tell a clean sweep
# from one with holes without reading the manifest.
EXIT_CONFIGS_TROUBLED = 3

# Wide enough for the summary table when the output is a file or a pipe.
out_console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True)


def summary_table(frame) -> Table:
    """A compact table of a run's summary: one row per config and repeat."""
    table = Table(title="summary (means per step)", show_lines=False)
    cols = [("config_id", "config"), ("repeat", "rep"), ("workers", "N"), ("servers", "S"),
            ("gradient_bytes", "grad"), ("init_s", "init s"), ("train_s", "train s"),
            ("steps_per_s", "steps/s"), ("compute_mean_s", "compute ms"), ("push_mean_s", "push ms"),
            ("queue_mean_s", "queue ms"), ("apply_mean_s", "apply ms")]
    for _, title in cols:
        table.add_column(title, justify="right")
    for _, row in frame.iterrows():
        cells = []
        for key, _ in cols:
            v = row[key]
            if key == "gradient_bytes":
                cells.append(format_bytes(v))
            elif key.endswith("_mean_s"):
                cells.append("-" if v != v else f"{v * 1e3:.3f}")
            elif isinstance(v, float):
                cells.append(f"{v:.3f}")
            else:
                cells.append(str(v))
        table.add_row(*cells)
    return table


def progress_bar() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err_console, transient=False, disable=not err_console.is_terminal and "CI" in os.environ)


def parse_interval(text: str) -> Optional[float]:
    """The --monitor-interval option in seconds; None turns the monitors off."""
    from testbed.config.units import parse_seconds
    try:
        interval_s = parse_seconds(text)
    except (ValueError, TypeError) as err:
        raise UserError(f"--monitor-interval {text!r}: {err}") from None
    if interval_s < 0:
        raise UserError(f"--monitor-interval {text!r}: must be >= 0 (0 turns the monitors off)")
    return interval_s or None


def say_problems(folder) -> None:
    """One line per config repeat that timed out or failed (the run went on past it)."""
    for f in folder.manifest.get("finished", []):
        if f.get("status", "ok") != "ok":
            err_console.print(f"warning: {f['config_id']} repeat {f['repeat']} {f['status']}: {f.get('error', '')}",
                              markup=False, highlight=False, soft_wrap=True)


def exit_for_troubled(folder) -> None:
    """Exit with ``EXIT_CONFIGS_TROUBLED`` when any config repeat failed or timed out."""
    if folder.troubled():
        import typer
        raise typer.Exit(EXIT_CONFIGS_TROUBLED)
