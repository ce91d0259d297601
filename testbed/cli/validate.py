"""``testbed validate``: calibrate (or reuse the cached profile), run, predict with every
model family, compare, and write the report, all into one run folder.

The profile used is saved in the folder (``profile.json``) so that ``testbed report``
can regenerate every table and plot from the folder alone.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, List, Optional

import typer

from testbed.calibration.calibrate import calibrate
from testbed.cli.app import app
from testbed.cli.common import exit_for_troubled, out_console, parse_interval, progress_bar, say_problems, summary_table
from testbed.config.spec import ExperimentSpec, RunConfig, expand
from testbed.model.profile import HardwareProfile, check_profile_machine, load_profile, save_profile
from testbed.records.events import DEFAULT_INTERVAL_S
from testbed.records.manifest import RunStatus
from testbed.records.rundir import PROFILE_FILE, RunFolder, atomic_write_text
from testbed.runner.run import run_experiment

__all__ = ["validate", "validate_command", "with_dataset_reads", "dataset_read_bytes_per_s"]

# Concurrent readers at which the data set's own reads are measured.
READERS = (1, 2, 4, 8, 16)


def dataset_read_bytes_per_s(cfg: RunConfig, readers: tuple[int, ...] = READERS) -> dict[int, float]:
    """Aggregate bandwidth of k concurrent readers, each reading its shard of the config's data
    set once (threads; the reads release the GIL), as k workers read it at init."""
    import threading
    import time

    from testbed.data.dataset import prepare_dataset
    from testbed.data.diskio import DirectReader, init_read_plan, plan_bytes

    info = prepare_dataset(cfg.data, cfg.workload.dataset_bytes)
    out = {}
    for k in readers:
        plans = [init_read_plan(info.files, cfg.workload.dataset_bytes, i, k, "shard") for i in range(k)]
        readers_ = [DirectReader(cfg.data.block_bytes, info.cache_bypass) for _ in range(k)]
        threads = [threading.Thread(target=r.read_plan, args=(p,)) for r, p in zip(readers_, plans)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out[k] = sum(plan_bytes(p) for p in plans) / (time.perf_counter() - t0)
        for r in readers_:
            r.close()
    return out


def with_dataset_reads(profile: HardwareProfile, cfg: RunConfig, address: Optional[str]) -> HardwareProfile:
    """The profile with its disk figures measured on the data set the run will read, from a Ray
    worker process as the workers read it. The calibration's own file was just written, and
    some virtual disks serve a freshly written file faster than one written long ago; the
    data set is what init reads. The calibration's figures stay in ``disk_reference``'s place
    when there were no fio figures."""
    import ray

    from testbed.model.profile import DiskProfile
    from testbed.runner.cluster import ray_session
    with ray_session(address):
        bandwidth = ray.get(ray.remote(num_cpus=0)(dataset_read_bytes_per_s).remote(cfg))
    old = profile.disk
    disk = DiskProfile(seq_read_bytes_per_s=bandwidth, block_bytes=cfg.data.block_bytes,
                       rand_read_iops=old.rand_read_iops if old else {}, latency_s=old.latency_s if old else {},
                       directory=str(cfg.data.dir), fs_type=old.fs_type if old else "",
                       source="testbed-reader (the data set)")
    return dataclasses.replace(profile, disk=disk, disk_reference=profile.disk_reference or old)


def validate(spec: ExperimentSpec, *, out: Optional[Path] = None, address: Optional[str] = None,
             profile_path: Optional[Path] = None, recalibrate: bool = False,
             progress: Optional[Callable[[str, int, int], None]] = None,
             monitor_interval_s: Optional[float] = DEFAULT_INTERVAL_S, quick_calibration: bool = False) -> RunFolder:
    """Run ``spec`` and compare it with every model family; returns the run folder.

    ``quick_calibration``: fewer repetitions when a profile must be measured (smoke tests)."""
    say = (lambda what: progress(what, 0, 0)) if progress else (lambda what: None)
    configs = expand(spec)
    if profile_path is not None:
        profile: HardwareProfile = load_profile(profile_path)
        import socket

        from testbed.calibration.calibrate import _cpu_model
        check_profile_machine(profile, profile_path, socket.gethostname(), _cpu_model(), "this machine")
    else:
        needs_disk = any(c.workload.dataset_bytes > 0 for c in configs)
        data_dir = configs[0].data.dir if needs_disk else None
        profile, _, reused = calibrate(address=address, recalibrate=recalibrate, data_dir=data_dir,
                                       with_disk=needs_disk, quick=quick_calibration,
                                       progress=lambda what: say(f"calibrating: {what}"))
        if reused:
            say("using the cached hardware profile")
    if any(c.workload.dataset_bytes > 0 for c in configs):
        say("measuring reads of the data set itself")
        profile = with_dataset_reads(profile, max(configs, key=lambda c: c.workload.dataset_bytes), address)
    from testbed.report.sections import write_report
    from testbed.runner.deadlines import default_deadlines

    def profile_and_report(folder: RunFolder, status: RunStatus) -> None:
        # Under the folder's lock, before the status is settled: a run marked complete has its
        # profile, its errors and its report (a kill before this leaves it interrupted instead).
        save_profile(profile, folder.path / PROFILE_FILE, atomic_write_text)
        write_report(folder, status=status)

    return run_experiment(spec, out=out, address=address, progress=progress, monitor_interval_s=monitor_interval_s,
                          deadlines=default_deadlines(configs, profile), before_settle=profile_and_report)


@app.command("validate")
def validate_command(spec: Path = typer.Argument(..., help="experiment spec (YAML)"),
             out: Optional[Path] = typer.Option(None, "--out", help="run folder (default: results/<name>-<time>)"),
             address: Optional[str] = typer.Option(None, "--address", help="Ray cluster to use: 'auto' or HOST:PORT"),
             profile: Optional[Path] = typer.Option(None, "--profile", help="use this profile instead of calibrating"),
             recalibrate: bool = typer.Option(False, "--recalibrate", help="measure the hardware again"),
             set_: List[str] = typer.Option([], "--set", help="override a spec field: key=value (repeatable)"),
             monitor_interval: str = typer.Option("200ms", "--monitor-interval",
                                                  help="node monitors' sampling interval ('0' turns them off)")) -> None:
    """Calibrate (or reuse), run SPEC, predict it with every model family, compare, report.

    Exit code 0 when every config repeat ran ok, 3 when some failed or timed out (they are left
    out of the model's error tables), 2 for a mistake the user can fix."""
    from testbed.config.spec import load_spec

    interval_s = parse_interval(monitor_interval)
    experiment = load_spec(spec, overrides=set_)
    with progress_bar() as bar:
        task = bar.add_task(experiment.name, total=None)

        def progress(label: str, done: int, total: int) -> None:
            bar.update(task, description=label, completed=done, total=total or None)

        folder = validate(experiment, out=out, address=address, profile_path=profile,
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
    say_problems(folder)
    exit_for_troubled(folder)
