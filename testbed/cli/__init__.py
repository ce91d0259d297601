"""The ``testbed`` command line: a thin layer over library functions.

Every subcommand parses its arguments, calls one function of the library, and
prints. A ``UserError`` becomes one line on stderr and exit code 2; Ctrl-C exits
130 after the run folder has been marked ``incomplete``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from testbed.config.errors import EXIT_USER_ERROR, UserError

__all__ = ["app", "main", "summary_table"]

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Emulate parameter-server training on Ray, predict it with a model, compare.")
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
    from testbed.config.units import format_bytes
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


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=err_console, transient=False, disable=not err_console.is_terminal and "CI" in os.environ)


@app.command()
def run(spec: Optional[Path] = typer.Argument(None, help="experiment spec (YAML); with --resume, default the saved one"),
        out: Optional[Path] = typer.Option(None, "--out", help="run folder (default: results/<name>-<time>)"),
        resume: Optional[Path] = typer.Option(None, "--resume", help="finish this interrupted run folder: run only "
                                              "the config repeats it lacks (the spec must be the same)"),
        address: Optional[str] = typer.Option(None, "--address", help="Ray cluster to use: 'auto' or HOST:PORT"),
        set_: List[str] = typer.Option([], "--set", help="override a spec field: key=value (repeatable)"),
        monitor_interval: str = typer.Option("200ms", "--monitor-interval",
                                             help="node monitors' sampling interval ('0' turns them off)")) -> None:
    """Run every config x repeat of SPEC and write a run folder with its report."""
    from testbed.report.sections import write_report
    from testbed.runner.run import run_experiment

    interval_s = _interval(monitor_interval)
    experiment = _spec_for_run(spec, resume, out, set_)
    with _progress() as bar:
        task = bar.add_task(experiment.name, total=None)

        def progress(label: str, done: int, total: int) -> None:
            bar.update(task, description=label, completed=done, total=total or None)

        folder = run_experiment(experiment, out=out, address=address, progress=progress,
                                monitor_interval_s=interval_s, resume=resume)
    write_report(folder.path)
    out_console.print(summary_table(folder.summary()))
    _say_problems(folder)
    out_console.print(f"results: {folder.path}")


def _spec_for_run(spec: Optional[Path], resume: Optional[Path], out: Optional[Path], overrides: list[str]):
    """The spec to run: SPEC with its --set overrides; with --resume and no SPEC, the folder's own."""
    from testbed.config.spec import load_spec, parse_spec
    if resume is not None and out is not None:
        raise UserError("--resume appends to the folder it names; leave out --out")
    if spec is not None:
        return load_spec(spec, overrides=overrides)
    if resume is None:
        raise UserError("give a spec file (testbed run SPEC), or --resume RUN_DIR to finish an interrupted run")
    from testbed.config.spec import with_reliability_defaults
    from testbed.records.rundir import RunFolder
    saved = RunFolder.open(resume).manifest.get("spec")
    if not isinstance(saved, dict):
        raise UserError(f"{resume}: the manifest holds no spec; give the spec file as well")
    return parse_spec(with_reliability_defaults(saved), source=f"{resume}/manifest.json", overrides=overrides)


def _say_problems(folder) -> None:
    """One line per config repeat that timed out or failed (the run went on past it)."""
    for f in folder.manifest.get("finished", []):
        if f.get("status", "ok") != "ok":
            err_console.print(f"warning: {f['config_id']} repeat {f['repeat']} {f['status']}: {f.get('error', '')}",
                              markup=False, highlight=False, soft_wrap=True)


def _interval(text: str) -> Optional[float]:
    """The --monitor-interval option in seconds; None turns the monitors off."""
    from testbed.config.units import parse_seconds
    try:
        interval_s = parse_seconds(text)
    except (ValueError, TypeError) as err:
        raise UserError(f"--monitor-interval {text!r}: {err}") from None
    if interval_s < 0:
        raise UserError(f"--monitor-interval {text!r}: must be >= 0 (0 turns the monitors off)")
    return interval_s or None


@app.command()
def validate(spec: Path = typer.Argument(..., help="experiment spec (YAML)"),
             out: Optional[Path] = typer.Option(None, "--out", help="run folder (default: results/<name>-<time>)"),
             address: Optional[str] = typer.Option(None, "--address", help="Ray cluster to use: 'auto' or HOST:PORT"),
             profile: Optional[Path] = typer.Option(None, "--profile", help="use this profile instead of calibrating"),
             recalibrate: bool = typer.Option(False, "--recalibrate", help="measure the hardware again"),
             set_: List[str] = typer.Option([], "--set", help="override a spec field: key=value (repeatable)"),
             monitor_interval: str = typer.Option("200ms", "--monitor-interval",
                                                  help="node monitors' sampling interval ('0' turns them off)")) -> None:
    """Calibrate (or reuse), run SPEC, predict it with every model family, compare, report."""
    from testbed.cli.validate import validate as run_validation
    from testbed.config.spec import load_spec

    interval_s = _interval(monitor_interval)
    experiment = load_spec(spec, overrides=set_)
    with _progress() as bar:
        task = bar.add_task(experiment.name, total=None)

        def progress(label: str, done: int, total: int) -> None:
            bar.update(task, description=label, completed=done, total=total or None)

        folder = run_validation(experiment, out=out, address=address, profile_path=profile,
                                recalibrate=recalibrate, progress=progress, monitor_interval_s=interval_s)
    out_console.print(summary_table(folder.summary()))
    errors = folder.path / "errors.csv"
    if errors.is_file():
        import pandas as pd
        frame = pd.read_csv(errors)
        frame = frame[frame["phase"].isin(["init", "train", "total"])]
        for _, row in frame.iterrows():
            out_console.print(f"{row['model']:>9} {row['phase']:>5}: median |error| {row['median_abs_err']:.1%}, "
                              f"max {row['max_abs_err']:.1%}")
    out_console.print(f"results: {folder.path} (report: {folder.path / 'report.md'})")


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
    with err_console.status("calibrating") as status:
        profile, path, reused = run_calibration(
            address=address, out=out, recalibrate=recalibrate, data_dir=data_dir, with_disk=not no_disk,
            quick=quick, progress=lambda what: status.update(f"calibrating: {what}"))
    out_console.print(profile_table(profile))
    out_console.print(f"profile: {path}" + (" (cached; --recalibrate to measure again)" if reused else ""))


@calibrate_app.command("disk")
def calibrate_disk_cmd(directory: Path = typer.Option(..., "--dir", help="directory on the disk to measure"),
                       out: Optional[Path] = typer.Option(None, "--out", help="write the disk profile (JSON) here"),
                       max_jobs: int = typer.Option(4, "--max-jobs", help="largest number of concurrent readers"),
                       allow_cached: bool = typer.Option(False, "--allow-cached", help="accept tmpfs (no bypass)")) -> None:
    """Measure the disk under DIR with fio (direct I/O)."""
    from testbed.calibration.disk import calibrate_disk
    with err_console.status("calibrating the disk") as status:
        disk = calibrate_disk(directory, out, max_jobs=max_jobs, allow_cached=allow_cached,
                              progress=lambda what: status.update(f"disk: {what}"))
    from testbed.config.units import format_bytes
    for jobs, bps in sorted(disk.seq_read_bytes_per_s.items()):
        out_console.print(f"sequential read, {jobs} reader(s): {format_bytes(bps)}/s")
    for block, iops in sorted(disk.rand_read_iops.items()):
        out_console.print(f"random read {format_bytes(block)}: {iops:,.0f} IOPS")
    out_console.print(f"source: {disk.source}" + (f"; written: {out}" if out else ""))


def profile_table(profile) -> Table:
    from testbed.config.units import format_bytes, format_seconds
    table = Table(title="hardware profile")
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [("cores per node", str(profile.cores_per_node)),
            ("actor-call latency", format_seconds(profile.actor_call_latency_s)),
            ("transfer bandwidth (same node)", f"{format_bytes(profile.transfer_bytes_per_s_local)}/s"),
            ("server apply bandwidth", f"{format_bytes(profile.server_apply_bytes_per_s)}/s"),
            ("server per-call overhead", format_seconds(profile.server_call_overhead_s)),
            ("matmul rate", f"{profile.flops_per_s / 1e9:.1f} GFLOP/s")]
    for key, value in sorted(profile.scalar_figures().items()):
        if key.endswith("_bytes_per_s"):
            rows.append((key, f"{format_bytes(value)}/s"))
        else:
            rows.append((key, format_seconds(value) if key.endswith("_s") else f"{value:.4g}"))
    if profile.disk:
        for jobs, bps in sorted(profile.disk.seq_read_bytes_per_s.items()):
            rows.append((f"disk sequential read, {jobs} reader(s)", f"{format_bytes(bps)}/s"))
        rows.append(("disk figures from", profile.disk.source))
    for name, value in rows:
        table.add_row(name, value)
    return table


@app.command()
def predict(spec: Path = typer.Argument(..., help="experiment spec (YAML)"),
            profile: Path = typer.Option(..., "--profile", help="hardware profile (JSON) from `testbed calibrate`"),
            models: str = typer.Option("initial,updated,queueing", "--models", help="model families, comma-separated"),
            csv: Optional[Path] = typer.Option(None, "--csv", help="write the predictions here"),
            set_: List[str] = typer.Option([], "--set", help="override a spec field: key=value (repeatable)")) -> None:
    """Predict every config of SPEC with the model (no Ray needed)."""
    from testbed.config.spec import load_spec
    from testbed.model.sweep import format_table, predict_spec, write_csv
    frame = predict_spec(load_spec(spec, overrides=set_), profile, models)
    out_console.print(format_table(frame), markup=False, highlight=False)
    if csv:
        write_csv(frame, csv)
        out_console.print(f"written: {csv}")


@app.command()
def report(run_dir: Path = typer.Argument(..., help="a run folder written by `testbed run`"),
           profile: Optional[Path] = typer.Option(None, "--profile",
                                                  help="compare with the model on this profile (saved in the folder)")
           ) -> None:
    """Regenerate RUN_DIR's summary.csv, trace.json, plots and report.md from its records."""
    from testbed.report.sections import write_report
    if profile is not None:
        from testbed.model.profile import check_profile_machine, load_profile, save_profile
        from testbed.records.rundir import PROFILE_FILE, RunFolder
        folder = RunFolder.open(run_dir)  # a bad folder is refused before anything is written
        loaded = load_profile(profile)
        if folder.manifest.get("host"):
            check_profile_machine(loaded, profile, folder.manifest["host"], None, "the machine this run used")
        save_profile(loaded, folder.path / PROFILE_FILE)
    path = write_report(run_dir)
    out_console.print(f"report: {path}")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def bench(ctx: typer.Context) -> None:
    """Run the testbed's own benchmarks (python -m benchmarks; --only, --quick, --out)."""
    from testbed.bench.__main__ import main as bench_main
    code = bench_main(list(ctx.args))
    if code:
        raise typer.Exit(code)


@app.command()
def version() -> None:
    """Print the testbed's version."""
    from testbed import __version__
    out_console.print(__version__)


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point of the console script; returns the exit code.

    SIGTERM (a kill, a batch system's time limit) ends a run like Ctrl-C: the folder is marked
    ``incomplete`` and keeps every finished config (Ray's driver turns SIGTERM into SystemExit,
    and ``run_experiment`` handles both)."""
    import signal
    try:
        signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread (tests calling main in a thread)
        pass
    try:
        code = app(args=argv, standalone_mode=False)  # a command's typer.Exit(n) comes back as n
        if code == 130:  # typer turns KeyboardInterrupt into this return value
            raise KeyboardInterrupt
    except UserError as err:
        err_console.print(f"error: {err}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        err_console.print("interrupted: finished configs are kept; the run folder is marked incomplete "
                          "(finish it with `testbed run --resume RUN_DIR`)", markup=False, highlight=False)
        return 130
    except SystemExit as exit_:
        import signal
        if exit_.code in (signal.SIGTERM, 128 + signal.SIGTERM):
            err_console.print("terminated: finished configs are kept; the run folder is marked incomplete "
                              "(finish it with `testbed run --resume RUN_DIR`)", markup=False, highlight=False)
            return 128 + signal.SIGTERM
        raise
    except Exception as err:  # click's usage errors carry their own exit code
        import click
        if isinstance(err, click.exceptions.ClickException):
            err.show()
            return EXIT_USER_ERROR
        if isinstance(err, click.exceptions.Abort):
            return 130
        raise
    return code if isinstance(code, int) else 0


def _terminate(signum, frame) -> None:
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    sys.exit(main())
