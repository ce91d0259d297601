"""``testbed calibrate`` (and ``calibrate disk``): measure the hardware figures the model needs."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from testbed.cli.app import app
from testbed.cli.common import out_console, progress_reporter

__all__ = ["calibrate", "calibrate_disk_cmd", "profile_table"]

calibrate_app = typer.Typer(invoke_without_command=True, no_args_is_help=False,
                            help="Measure the hardware figures the model needs (cached per machine).")
app.add_typer(calibrate_app, name="calibrate")


@calibrate_app.callback()
def calibrate(ctx: typer.Context,
              address: Optional[str] = typer.Option(None, "--address", help="Ray cluster: 'auto' or HOST:PORT"),
              out: Optional[Path] = typer.Option(None, "--out", help="also write the profile here"),
              recalibrate: bool = typer.Option(False, "--recalibrate", help="measure again even if cached"),
              data_dir: Optional[str] = typer.Option(None, "--data-dir", help="directory whose disk to measure"),
              no_disk: bool = typer.Option(False, "--no-disk", help="skip the disk (fio) measurements"),
              quick: bool = typer.Option(False, "--quick", help="fewer repetitions (for smoke tests)")) -> None:
    """Calibrate everything: actor calls, transfers, the server, FLOPs, cores and the disk."""
    if ctx.invoked_subcommand is not None:
        return
    from testbed.calibration.calibrate import calibrate as run_calibration
    with progress_reporter("calibrating") as progress:
        profile, path, reused = run_calibration(
            address=address, out=out, recalibrate=recalibrate, data_dir=data_dir, with_disk=not no_disk,
            quick=quick, progress=lambda what: progress(f"calibrating: {what}", 0, 0))
    out_console.print(profile_table(profile))
    out_console.print(f"profile: {path}" + (" (cached; --recalibrate to measure again)" if reused else ""))


@calibrate_app.command("disk")
def calibrate_disk_cmd(directory: Path = typer.Option(..., "--dir", help="directory on the disk to measure"),
                       out: Optional[Path] = typer.Option(None, "--out", help="write the disk profile (JSON) here"),
                       max_jobs: int = typer.Option(4, "--max-jobs", help="largest number of concurrent readers"),
                       allow_cached: bool = typer.Option(False, "--allow-cached", help="accept tmpfs (no bypass)")) -> None:
    """Measure the disk under DIR with fio (direct I/O)."""
    from testbed.calibration.disk import calibrate_disk
    with progress_reporter("calibrating the disk") as progress:
        disk = calibrate_disk(directory, out, max_jobs=max_jobs, allow_cached=allow_cached,
                              progress=lambda what: progress(f"disk: {what}", 0, 0))
    from testbed.config.units import format_bytes
    for jobs, bps in sorted(disk.seq_read_bytes_per_s.items()):
        out_console.print(f"sequential read, {jobs} reader(s): {format_bytes(bps)}/s")
    for block, iops in sorted(disk.rand_read_iops.items()):
        out_console.print(f"random read {format_bytes(block)}: {iops:,.0f} IOPS")
    out_console.print(f"source: {disk.source}" + (f"; written: {out}" if out else ""))


def profile_table(profile) -> Table:
    """The profile's figures as a console table: the report's rows (``profile_rows``)."""
    from testbed.report.profile_rows import profile_rows
    table = Table(title="hardware profile")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in profile_rows(profile):
        table.add_row(name, value)
    return table
