"""``testbed validate``: calibrate (or reuse the cached profile), run, predict with every
model family, compare, and write the report, all into one run folder.

The profile used is saved in the folder (``profile.json``) so that ``testbed report``
can regenerate every table and plot from the folder alone.

``testbed validate SPACE --sample K`` draws K configs from a validation space
(``testbed.config.space``) and validates them like a spec's; the seed defaults to today's
date (UTC, YYYYMMDD), is printed, and is recorded in the manifest (``sample``) with the
space itself, so the draw can be re-made. ``--noise N`` runs the first N drawn configs
``NOISE_REPEATS`` times back to back, for the noise floor beside the errors.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer

from testbed.calibration.calibrate import calibrate
from testbed.cli.app import app
from testbed.cli.common import (
    LARGE_SWEEP_HELP,
    check_sweep,
    exit_for_troubled,
    out_console,
    parse_interval,
    progress_reporter,
    say_problems,
    summary_table,
)
from testbed.config.choices import StepReads
from testbed.config.errors import UserError
from testbed.config.space import Space, sample, sampled_spec
from testbed.config.spec import ExperimentSpec, RunConfig, expand
from testbed.model.profile import HardwareProfile, check_profile_machine, load_profile, save_profile
from testbed.records.events import DEFAULT_INTERVAL_S
from testbed.records.manifest import RunStatus
from testbed.records.rundir import PROFILE_FILE, RunFolder, atomic_write_text
from testbed.runner.run import run_experiment

__all__ = ["validate", "validate_space", "validate_command", "with_dataset_reads", "dataset_read_bytes_per_s",
           "date_seed", "NOISE_REPEATS", "DRIFT_BOUNDS", "level_after_runs"]

# How often each noise-floor config runs, back to back.
NOISE_REPEATS = 5

# The level after the runs over the one before them, outside which a warning is said: three
# rounds of the check within one session read up to 0.2 apart (testbed.calibration.level,
# CHECK_REPEATS), so a quarter either way is the machine moving, not the check's own noise.
DRIFT_BOUNDS = (0.75, 1 / 0.75)

# Concurrent readers at which the data set's own reads are measured, and the passes at each
# (their median: one pass of 16 readers over a 64 MiB data set read 1.4 GB/s where the runs'
# 16 workers read it at 3 GB/s, the virtual disk's moment).
READERS = (1, 2, 4, 8, 16)
PASSES = 3


def dataset_read_bytes_per_s(cfg: RunConfig, readers: tuple[int, ...] = READERS) -> dict[int, float]:
    """Aggregate bandwidth of k concurrent readers, each reading its shard of the config's data
    set once (threads; the reads release the GIL), as k workers read it at init.

    One untimed pass over the whole data set comes first (``warm_dataset``, as every run makes):
    the runs read it again and again (every config's init), and the first pass after it was
    prepared is not what they see. On the
    2-core VM of 2026-12-01 (18:01), measured first, one reader read the 256 MiB data set of
    ``experiments/paper_cntk.yaml`` at 1.8 GB/s and two at 4.0; its runs then read 256 MiB per
    worker at 3.3-3.5 GB/s, one at a time, and the simulated init came out 91 % long."""
    import statistics
    import threading
    import time

    from testbed.data.dataset import prepare_dataset, warm_dataset
    from testbed.data.diskio import DirectReader, init_read_plan, plan_bytes

    info = warm_dataset(prepare_dataset(cfg.data, cfg.workload.dataset_bytes), cfg.data.block_bytes)
    out = {}
    for k in readers:
        plans = [init_read_plan(info.files, cfg.workload.dataset_bytes, i, k, "shard") for i in range(k)]
        passes = []
        for _ in range(PASSES):
            readers_ = [DirectReader(cfg.data.block_bytes, info.cache_bypass) for _ in range(k)]
            threads = [threading.Thread(target=r.read_plan, args=(p,)) for r, p in zip(readers_, plans)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            passes.append(sum(plan_bytes(p) for p in plans) / (time.perf_counter() - t0))
            for r in readers_:
                r.close()
        out[k] = statistics.median(passes)
    return out


def dataset_first_read_times(cfg: RunConfig) -> tuple[list[float], int]:
    """The data set's first reads after idle (``diskio.first_read_times``): the first
    ``START_BYTES`` of its files in turn, ``START_SAMPLES`` of them, each by a new reader after
    ``START_PAUSE_S``; returns (seconds each, bytes each). Run after ``dataset_read_bytes_per_s``,
    whose passes leave the data set as warm as a run's warm pass does."""
    from testbed.data.dataset import prepare_dataset
    from testbed.data.diskio import ALIGN_BYTES, START_BYTES, START_SAMPLES, first_read_times

    info = prepare_dataset(cfg.data, cfg.workload.dataset_bytes)
    files = [(p, n) for p, n in info.files if n >= ALIGN_BYTES]
    if not files:
        return [], 0
    nbytes = min(START_BYTES, min(n for _, n in files) // ALIGN_BYTES * ALIGN_BYTES)
    extents = [(files[k % len(files)][0], 0, nbytes) for k in range(START_SAMPLES)]
    return first_read_times(extents, cfg.data.block_bytes, info.cache_bypass), nbytes


def with_dataset_reads(profile: HardwareProfile, cfg: RunConfig, address: Optional[str]) -> HardwareProfile:
    """The profile with its disk figures measured on the data set the run will read, from a Ray
    worker process as the workers read it. The calibration's own file was just written, and
    some virtual disks serve a freshly written file faster than one written long ago; the
    data set is what init reads. The calibration's figures stay in ``disk_reference``'s place
    when there were no fio figures."""
    import ray

    from testbed.data.diskio import read_start_s
    from testbed.runner.cluster import ray_session

    with ray_session(address):
        bandwidth = ray.get(ray.remote(num_cpus=0)(dataset_read_bytes_per_s).remote(cfg))
        times, nbytes = ray.get(ray.remote(num_cpus=0)(dataset_first_read_times).remote(cfg))
    start = read_start_s(times, nbytes, bandwidth[min(bandwidth)]) if times else None
    return dataset_disk_profile(profile, bandwidth, cfg, start)


def dataset_disk_profile(profile: HardwareProfile, bandwidth: dict[int, float], cfg: RunConfig,
                         read_start: Optional[float] = None) -> HardwareProfile:
    """The profile with ``bandwidth`` (readers -> bytes/s over the run's data set) as its disk's
    sequential curve and ``read_start`` (a first read's cost after idle on the data set, None:
    the calibration's) as its ``read_start_s``, and every other figure of the calibration's disk
    carried over (random reads, by concurrent readers, the latency, the file system), its disk
    kept as ``disk_reference`` when there were no fio figures. Pure."""
    from testbed.model.profile import DiskProfile
    old = profile.disk
    fields = dict(seq_read_bytes_per_s=bandwidth, block_bytes=cfg.data.block_bytes, directory=str(cfg.data.dir),
                  source="testbed-reader (the data set)")
    if read_start is not None:
        fields["read_start_s"] = read_start
    disk = dataclasses.replace(old, **fields) if old else DiskProfile(**fields)
    return dataclasses.replace(profile, disk=disk, disk_reference=profile.disk_reference or old)


def validate(spec: ExperimentSpec, *, out: Optional[Path] = None, address: Optional[str] = None,
             profile_path: Optional[Path] = None, recalibrate: bool = False,
             progress: Optional[Callable[[str, int, int], None]] = None,
             monitor_interval_s: Optional[float] = DEFAULT_INTERVAL_S, quick_calibration: bool = False,
             plan: Optional[list[tuple[RunConfig, int]]] = None,
             manifest_extra: Optional[dict[str, Any]] = None, level_check: bool = True) -> RunFolder:
    """Run ``spec`` and compare it with every model family; returns the run folder.

    ``quick_calibration``: fewer repetitions when a profile must be measured (smoke tests).
    ``plan``: the (config, repeat) pairs to run instead of the spec's sweep (a draw);
    ``manifest_extra``: more fields for the manifest. ``level_check``: before the first config,
    re-measure a few calibration points in the session that runs the configs and predict at its
    per-call cost level (``testbed.calibration.level``; about 21 s, 7 with a quick calibration),
    and, when a config reads every step, record its step reads' level (``testbed.calibration.readlevel``,
    about 1.5 s more a round; recorded, not applied)."""
    say = (lambda what: progress(what, 0, 0)) if progress else (lambda what: None)
    configs = list({c.config_id: c for c, _ in plan}.values()) if plan else expand(spec)
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
    from testbed.report.writer import write_report
    from testbed.runner.deadlines import default_deadlines

    def profile_and_report(folder: RunFolder, status: RunStatus) -> None:
        # Under the folder's lock, before the status is settled: a run marked complete has its
        # profile, its errors and its report (a kill before this leaves it interrupted instead).
        save_profile(profile, folder.path / PROFILE_FILE, atomic_write_text)
        write_report(folder, status=status)

    readers = [c for c in configs if c.data.step_reads is not StepReads.NONE and c.workload.dataset_bytes > 0]

    calibrated = profile

    def check_level() -> None:
        nonlocal profile, calibrated
        from testbed.calibration.level import CHECK_REPEATS
        calibrated = profile
        # One round when calibration is quick (smoke tests), three otherwise (level.CHECK_REPEATS).
        repeats = 1 if quick_calibration else CHECK_REPEATS
        reads = ReadCheck(readers[0].data.dir, profile, say) if readers and profile.step_reads is not None else None
        profile = profile_at_session_level(profile, say, repeats=repeats,
                                           after_round=reads.round if reads else None)
        if reads is not None:
            profile = reads.finish(profile, repeats)

    def check_level_after() -> None:
        nonlocal profile
        profile = level_after_runs(profile, calibrated, say)

    return run_experiment(spec, out=out, address=address, progress=progress, monitor_interval_s=monitor_interval_s,
                          deadlines=default_deadlines(configs, profile), plan=plan, manifest_extra=manifest_extra,
                          before_settle=profile_and_report, before_runs=check_level if level_check else None,
                          after_runs=check_level_after if level_check else None)


def level_after_runs(profile: HardwareProfile, calibrated: HardwareProfile, say: Callable[[str], None],
                     measure: Optional[Callable[..., HardwareProfile]] = None) -> HardwareProfile:
    """``profile`` with the per-call level checked again after the last config (one round against
    the ``calibrated`` curves) kept as its ``call_level["after"]``, that level said beside the one
    checked before the runs, and the runs predicted at the level of their span, the two checks'
    geometric mean (``testbed.calibration.level``, ``with_level_after``, ``at_span_level``). A
    failed check is said and kept the same way, and the level before stands: the runs lose nothing."""
    from testbed.calibration.level import (
        at_span_level,
        failed_level_record,
        level_drift,
        measure_call_level,
        with_level_after,
    )
    try:
        checked = (measure or measure_call_level)(calibrated, say, repeats=1)
        after = checked.call_level or {}
    except Exception as err:  # noqa: BLE001 - any failure of the check (a Ray error too)
        reason = f"{type(err).__name__}: {err}"
        say(f"warning: the per-call level check after the runs failed ({reason}); nothing else is lost")
        return with_level_after(profile, failed_level_record(reason))
    if "level" not in after:  # a profile without per-call curves: nothing was checked
        return profile
    profile = at_span_level(with_level_after(profile, after))
    drift = level_drift(profile.call_level)
    if drift is not None:
        span = profile.call_level.get("span") or {}
        at = f"; the runs are predicted at their span's x{span['level']:.2f}" if "level" in span else ""
        say(f"the per-call level after the runs: x{after['level']:.2f} of the calibration's "
            f"(before them x{profile.call_level['level']:.2f}; moved x{drift:.2f} while the configs ran{at})")
        if not DRIFT_BOUNDS[0] <= drift <= DRIFT_BOUNDS[1]:
            say(f"warning: the machine's per-call cost moved x{drift:.2f} while the configs ran: the errors "
                "of this folder hold that drift as well as the model's (docs/validation.md, \"The level "
                "after the runs\")")
    return profile


def profile_at_session_level(profile: HardwareProfile, say: Callable[[str], None],
                             measure: Optional[Callable[..., HardwareProfile]] = None,
                             repeats: Optional[int] = None,
                             after_round: Optional[Callable[[int], None]] = None) -> HardwareProfile:
    """``profile`` at the per-call level of the Ray session this process is connected to
    (``testbed.calibration.level``; ``repeats`` rounds over its sizes, None: its default;
    ``after_round`` after each); when the check fails, ``profile`` unchanged with the failure
    kept as its ``call_level`` and a warning said."""
    from testbed.calibration.level import CHECK_REPEATS, failed_level_record, measure_call_level
    try:
        return (measure or measure_call_level)(profile, say, repeats=CHECK_REPEATS if repeats is None else repeats,
                                               after_round=after_round)
    except Exception as err:  # noqa: BLE001 - any failure of the check (a Ray error too)
        # The check is the model's input, not the experiment: a failed check loses nothing the
        # runs record; they are predicted at the level the profile already had. The failure is
        # kept in the profile the folder saves, so the report's profile table says it (a
        # progress line alone is overwritten by the next config's).
        reason = f"{type(err).__name__}: {err}"
        say(f"warning: the per-call level check failed ({reason}); predicting at the profile's level")
        return dataclasses.replace(profile, call_level=failed_level_record(reason, profile.call_level))


class ReadCheck:
    """The step reads' check in the runs' session (``testbed.calibration.readlevel``): a round
    of reads in ``directory`` after each round of the per-call check (``round``), then the
    rounds' level recorded in the profile (``finish``; not applied: the calibration's curves
    predict). A failed round is said and kept as the profile's ``read_level``: the check is a
    record beside the runs, not the experiment."""

    def __init__(self, directory: str, profile: HardwareProfile, say: Callable[[str], None],
                 measure: Optional[Callable[..., Any]] = None) -> None:
        from testbed.calibration.readlevel import measure_read_round
        self.directory, self.say = directory, say
        self.block_bytes = profile.step_reads.block_bytes if profile.step_reads is not None else 2**20
        self.measure = measure or measure_read_round
        self.rounds: list[Any] = []
        self.failed: Optional[str] = None

    def round(self, r: int) -> None:
        if self.failed is not None:
            return
        self.say(f"checking the step reads' level of this session (round {r + 1})")
        try:
            self.rounds.append(self.measure(self.directory, block_bytes=self.block_bytes))
        except Exception as err:  # noqa: BLE001 - any failure of the probe (a Ray error too)
            self.failed = f"{type(err).__name__}: {err}"

    def finish(self, profile: HardwareProfile, repeats: int) -> HardwareProfile:
        from testbed.calibration.readlevel import failed_read_level, read_level_from_samples
        while self.failed is None and len(self.rounds) < repeats:  # the call check stopped early
            self.round(len(self.rounds))
        if self.failed is not None or not self.rounds or profile.step_reads is None:
            reason = self.failed or "no round of reads was made"
            self.say(f"warning: the step reads' level check failed ({reason}); predicting at the calibration's")
            return dataclasses.replace(profile, read_level=failed_read_level(reason))
        # Recorded, not applied: held out twice, the curves at the check's level did no better than
        # the calibration's (2026120719: read median 51 -> 49 %) and then worse (2026120720: 24 ->
        # 40 %); docs/model.md, "The step reads' level, checked in the runs' session".
        # ``apply_read_level`` re-predicts a folder with it.
        return dataclasses.replace(profile, read_level={**read_level_from_samples(profile.step_reads, self.rounds),
                                                        "applied": False})


def date_seed(today: Optional[_dt.date] = None) -> int:
    """Today's date (UTC) as the integer YYYYMMDD: the seed nobody chooses."""
    today = today or _dt.datetime.now(_dt.timezone.utc).date()
    return today.year * 10000 + today.month * 100 + today.day


def validate_space(space: Space, k: int, *, seed: Optional[int] = None, noise: int = 0,
                   **options: Any) -> RunFolder:
    """Draw ``k`` configs from ``space`` (seed: today's date when None), run and compare them
    like a spec's (``options`` as ``validate``'s); the first ``noise`` configs run
    ``NOISE_REPEATS`` times back to back. The manifest's ``sample`` records the draw."""
    seed_source = "given" if seed is not None else "the date, UTC"
    seed = date_seed() if seed is None else seed
    if not 0 <= noise <= k:
        raise UserError(f"--noise {noise}: repeat between 0 and --sample ({k}) of the drawn configs")
    configs = sample(space, k, seed)
    plan = [(c, r) for i, c in enumerate(configs) for r in range(NOISE_REPEATS if i < noise else 1)]
    import yaml
    try:
        space_data = yaml.safe_load(Path(space.source).read_text())
    except OSError:
        space_data = None
    record = {"space": space.source, "space_data": space_data, "k": k, "seed": seed, "seed_source": seed_source,
              "noise_repeats": NOISE_REPEATS, "noise_config_ids": [c.config_id for c in configs[:noise]]}
    return validate(sampled_spec(space, k, seed), plan=plan, manifest_extra={"sample": record}, **options)


@app.command("validate")
def validate_command(spec: Path = typer.Argument(..., help="experiment spec (YAML), or a validation space with --sample"),
             out: Optional[Path] = typer.Option(None, "--out", help="run folder (default: results/<name>-<time>)"),
             address: Optional[str] = typer.Option(None, "--address", help="Ray cluster to use: 'auto' or HOST:PORT"),
             profile: Optional[Path] = typer.Option(None, "--profile", help="use this profile instead of calibrating"),
             recalibrate: bool = typer.Option(False, "--recalibrate", help="measure the hardware again"),
             set_: List[str] = typer.Option([], "--set", help="override a spec field: key=value (repeatable)"),
             monitor_interval: str = typer.Option("200ms", "--monitor-interval",
                                                  help="node monitors' sampling interval ('0' turns them off)"),
             sample_k: Optional[int] = typer.Option(None, "--sample", help="SPEC is a validation space: draw this "
                                                    "many configs from it"),
             seed: Optional[int] = typer.Option(None, "--seed", help="the draw's seed (default: today's date, "
                                                "YYYYMMDD, UTC; never choose one to look good)"),
             noise: int = typer.Option(0, "--noise", help="run the first N drawn configs 5 times back to back "
                                       "(the noise floor)"),
             large_sweep: bool = typer.Option(False, "--large-sweep", help=LARGE_SWEEP_HELP),
             no_level_check: bool = typer.Option(False, "--no-level-check", help="predict at the calibration's "
                                                 "per-call cost level, without re-measuring "
                                                 "it in this session before the runs nor after them (nor "
                                                 "recording the step reads' level; saves about 28 s, 33 with "
                                                 "step reads)")) -> None:
    """Calibrate (or reuse), run SPEC, predict it with every model family, compare, report.

    Exit code 0 when every config repeat ran ok, 3 when some failed or timed out (they are left
    out of the model's error tables), 2 for a mistake the user can fix."""
    from testbed.config.space import is_space_file, load_space
    from testbed.config.spec import load_spec

    interval_s = parse_interval(monitor_interval)
    if sample_k is None:
        if seed is not None or noise:
            raise UserError("--seed and --noise go with --sample K (a draw from a validation space)")
        if is_space_file(spec):
            raise UserError(f"{spec} is a validation space (it has a space: part): draw from it with --sample K, "
                            f"e.g. testbed validate {spec} --sample 24")
        experiment = load_spec(spec, overrides=set_)
        check_sweep(experiment, large_sweep)
        space = None
    else:
        space = load_space(spec, overrides=set_)
        experiment = space.base
        # seed stays None when not given, so that the manifest says it came from the date
        out_console.print(f"drawing {sample_k} configs from {spec} with seed "
                          f"{f'{date_seed()} (the date, UTC)' if seed is None else seed}")
    with progress_reporter(experiment.name) as progress:

        options = dict(out=out, address=address, profile_path=profile, recalibrate=recalibrate, progress=progress,
                       monitor_interval_s=interval_s, level_check=not no_level_check)
        if space is None:
            folder = validate(experiment, **options)
        else:
            folder = validate_space(space, sample_k, seed=seed, noise=noise, **options)
    out_console.print(summary_table(folder.summary()))
    _print_errors(folder)
    out_console.print(f"results: {folder.path} (report: {folder.path / 'report.md'})")
    say_problems(folder)
    exit_for_troubled(folder)


def _print_errors(folder: RunFolder) -> None:
    """The job's errors per family (init, train, job), and the testbed's own start-up beside them."""
    import pandas as pd
    summary = folder.summary()
    if len(summary) and "setup_s" in summary:
        out_console.print(f"actor start-up (the testbed's overhead, not a model error): median "
                          f"{summary['setup_s'].median():.3f} s, max {summary['setup_s'].max():.3f} s")
    name = "distribution.csv" if (folder.path / "distribution.csv").is_file() else "errors.csv"
    if not (folder.path / name).is_file():
        return
    frame = pd.read_csv(folder.path / name)
    frame = frame[frame["phase"].isin(["init", "train", "job"])]
    for _, row in frame.iterrows():
        noise, as_error = row.get("noise_spread"), row.get("noise_abs_err")
        floor = f", noise {noise:.1%}" if noise == noise and noise is not None else ""
        if floor and as_error == as_error and as_error is not None:
            floor += f" (as an error {as_error:.1%})"
        out_console.print(f"{row['model']:>9} {row['phase']:>5}: |error| median {row['median_abs_err']:.1%}, "
                          f"p90 {row['p90_abs_err']:.1%}, max {row['max_abs_err']:.1%} (n={row['n']}){floor}")
    sample_ = folder.manifest.get("sample")
    if sample_:
        out_console.print(f"draw: {sample_['k']} configs from {sample_['space']}, seed {sample_['seed']} "
                          f"({sample_['seed_source']})")
