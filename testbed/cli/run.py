"""``testbed run``: run every config x repeat of a spec and write a run folder with its report."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from testbed.cli.app import app
from testbed.cli.common import (
    LARGE_SWEEP_HELP,
    check_sweep,
    err_console,
    exit_for_troubled,
    out_console,
    parse_interval,
    progress_reporter,
    say_problems,
    summary_table,
)
from testbed.config.errors import UserError

__all__ = ["run"]


@app.command()
def run(spec: Optional[Path] = typer.Argument(None, help="experiment spec (YAML); with --resume, default the saved one"),
        out: Optional[Path] = typer.Option(None, "--out", help="run folder (default: results/<name>-<time>)"),
        resume: Optional[Path] = typer.Option(None, "--resume", help="finish this interrupted run folder: run only "
                                              "the config repeats it lacks (the spec must be the same)"),
        address: Optional[str] = typer.Option(None, "--address", help="Ray cluster to use: 'auto' or HOST:PORT"),
        set_: List[str] = typer.Option([], "--set", help="override a spec field: key=value (repeatable)"),
        monitor_interval: str = typer.Option("200ms", "--monitor-interval",
                                             help="node monitors' sampling interval ('0' turns them off)"),
        large_sweep: bool = typer.Option(False, "--large-sweep", help=LARGE_SWEEP_HELP)) -> None:
    """Run every config x repeat of SPEC and write a run folder with its report.

    Exit code 0 when every config repeat ran ok, 3 when the run completed but some failed or
    timed out, 2 for a mistake the user can fix, 130/143 when interrupted."""
    from testbed.report.writer import write_report
    from testbed.runner.run import run_experiment

    interval_s = parse_interval(monitor_interval)
    experiment = _spec_for_run(spec, resume, out, set_)
    check_sweep(experiment, large_sweep)
    if resume is not None:
        _say_resuming(resume)
    with progress_reporter(experiment.name) as progress:

        # The report is written under the folder's lock, before the status is settled.
        folder = run_experiment(experiment, out=out, address=address, progress=progress,
                                monitor_interval_s=interval_s, resume=resume,
                                before_settle=lambda done, status: write_report(done, status=status))
    out_console.print(summary_table(folder.summary()))
    say_problems(folder)
    out_console.print(f"results: {folder.path}")
    exit_for_troubled(folder)


def _spec_for_run(spec: Optional[Path], resume: Optional[Path], out: Optional[Path], overrides: list[str]):
    """The spec to run: SPEC with its --set overrides; with --resume and no SPEC, the folder's own."""
    from testbed.config.spec import load_spec, parse_spec
    if resume is not None and out is not None:
        raise UserError("--resume appends to the folder it names; leave out --out")
    if spec is not None:
        return load_spec(spec, overrides=overrides)
    if resume is None:
        raise UserError("give a spec file (testbed run SPEC), or --resume RUN_DIR to finish an interrupted run")
    from testbed.records.rundir import RunFolder
    saved = RunFolder.open(resume).record.spec
    return parse_spec(saved, source=f"{resume}/manifest.json", overrides=overrides)


def _say_resuming(resume: Path) -> None:
    """One line on what is being resumed: its status as a reader sees it (``interrupted`` for a
    folder whose writer died) and how many config repeats it lacks."""
    from testbed.records.rundir import RunFolder
    folder = RunFolder.open(resume)
    missing = len(folder.missing())
    total = len(folder.record.configs) * folder.record.repeats
    err_console.print(f"resuming {resume}: {folder.status.value}, {missing} of {total} config repeat(s) missing",
                      markup=False, highlight=False, soft_wrap=True)
