"""What the subcommands share: the two consoles, the progress bar, the summary table,
and the parsing of options that several commands take."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Callable, Iterator, Optional

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from testbed.config.errors import UserError
from testbed.config.spec import MIN_DEADLINE_S
from testbed.config.sweep_size import LARGE_SWEEP_RUNS
from testbed.config.units import format_bytes

__all__ = ["out_console", "err_console", "progress_bar", "progress_reporter", "summary_table", "parse_interval", "say_problems",
           "check_sweep", "LARGE_SWEEP_HELP", "EXIT_CONFIGS_TROUBLED", "exit_for_troubled"]

LARGE_SWEEP_HELP = f"run a sweep of more than {LARGE_SWEEP_RUNS} config runs (configs x repeats)"

# `testbed run` and `testbed validate` exit with this when the run completed but some config
# repeat failed or timed out (its warning line says which): a script can tell a clean sweep
# from one with holes without reading the manifest.
EXIT_CONFIGS_TROUBLED = 3

# Wide enough for the summary table when the output is a file or a pipe.
out_console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True)


# Short console headers; a column not named here shows under its own name.
_TITLES = {"config_id": "config", "repeat": "rep", "workers": "N", "servers": "S", "gradient_bytes": "grad",
           "init_io": "init io", "steps_per_s": "steps/s"}


def _title(column: str) -> str:
    if column.endswith("_mean_s"):
        return f"{column[:-len('_mean_s')]} ms"
    if column.endswith("_s") and column not in _TITLES:
        return f"{column[:-2]} s"
    return _TITLES.get(column, column)


def _cell(column: str, value) -> str:
    if column == "gradient_bytes":
        return format_bytes(value)
    if isinstance(value, float) and value != value:
        return "-"
    if column.endswith("_mean_s"):
        return f"{value * 1e3:.3f}"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def summary_table(frame) -> Table:
    """A compact table of a run's summary, one row per config and repeat: the summary's shown
    columns (``testbed.records.summary.SHOWN_COLUMNS``) without the knobs every row shares."""
    from testbed.records.summary import shown_columns
    table = Table(title="summary (means per step)", show_lines=False)
    columns = shown_columns(frame, varying_knobs_only=True)
    for column in columns:
        table.add_column(_title(column), justify="right")
    for _, row in frame.iterrows():
        table.add_row(*(_cell(c, row[c]) for c in columns))
    return table


def progress_bar() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err_console, transient=False, disable=not err_console.is_terminal and "CI" in os.environ)


Reporter = Callable[[str, int, int], None]


@contextlib.contextmanager
def progress_reporter(name: str, console: Console = err_console,
                      clock: Callable[[], float] = time.monotonic) -> Iterator[Reporter]:
    """``progress(label, done, total)`` for a long command: a live bar on a terminal; elsewhere
    (a log file, a pipe, a notebook's cell) one plain line each time the label changes, with the
    seconds since the start, so that a run written to a log shows where it is while it runs
    (rich draws nothing live when stderr is not a terminal)."""
    if console.is_terminal:
        with progress_bar() as bar:
            task = bar.add_task(name, total=None)
            yield lambda label, done, total: bar.update(task, description=label, completed=done, total=total or None)
        return
    start, last = clock(), [None]

    def progress(label: str, done: int, total: int) -> None:
        if label == last[0]:
            return
        last[0] = label
        count = f" ({done}/{total})" if total else ""
        console.print(f"[{clock() - start:6.0f} s] {label}{count}", markup=False, highlight=False, soft_wrap=True)
    yield progress


def parse_interval(text: str) -> Optional[float]:
    """The --monitor-interval option in seconds; None turns the monitors off."""
    from testbed.config.units import parse_seconds
    try:
        interval_s = parse_seconds(text)
    except (ValueError, TypeError) as err:
        raise UserError(f"--monitor-interval {text!r}: {err}") from None
    if interval_s < 0:
        raise UserError(f"--monitor-interval {text!r}: must be >= 0 (0 turns the monitors off)")
    if 0 < interval_s < MIN_DEADLINE_S:  # a monitor sampling faster than this measures only itself
        raise UserError(f"--monitor-interval {text!r}: must be at least 1ms (or 0, which turns the monitors off)")
    return interval_s or None


def check_sweep(experiment, large_sweep: bool) -> None:
    """Refuse a sweep above the limit unless --large-sweep; print its estimated run time when allowed."""
    from testbed.config.sweep_size import check_sweep_size
    estimate = check_sweep_size(experiment, large_sweep)
    if estimate:
        err_console.print(f"note: {estimate}", markup=False, highlight=False, soft_wrap=True)


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
