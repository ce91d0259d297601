"""``testbed report``: rebuild a run folder's summary, trace, plots and report from its records."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from testbed.cli.app import app
from testbed.cli.common import out_console

__all__ = ["report"]


@app.command()
def report(run_dir: Path = typer.Argument(..., help="a run folder written by `testbed run`"),
           profile: Optional[Path] = typer.Option(None, "--profile",
                                                  help="compare with the model on this profile (saved in the folder)")
           ) -> None:
    """Regenerate RUN_DIR's summary.csv, trace.json, plots and report.md from its records."""
    from testbed.records.rundir import PROFILE_FILE, RunFolder, atomic_write_text
    from testbed.report.writer import write_report
    # A bad folder is refused before anything is written; one being written by a run is refused
    # (naming its owner) rather than raced.
    with RunFolder.held(run_dir) as folder:
        if profile is not None:
            from testbed.model.profile import check_profile_machine, load_profile, save_profile
            loaded = load_profile(profile)
            if folder.record.host:
                check_profile_machine(loaded, profile, folder.record.host, None, "the machine this run used")
            save_profile(loaded, folder.path / PROFILE_FILE, atomic_write_text)
        path = write_report(folder)
    out_console.print(f"report: {path}")
