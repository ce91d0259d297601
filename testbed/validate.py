"""``testbed validate``: calibrate (or reuse the cached profile), run, predict with every
model family, compare, and write the report, all into one run folder.

The profile used is saved in the folder (``profile.json``) so that ``testbed report``
can regenerate every table and plot from the folder alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from actors.monitor import DEFAULT_INTERVAL_S
from testbed.calibrate import calibrate
from testbed.profile import HardwareProfile, check_profile_machine, load_profile, save_profile
from testbed.rundir import PROFILE_FILE, RunFolder
from testbed.run import run_experiment
from testbed.spec import ExperimentSpec, expand

__all__ = ["validate"]


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

        from testbed.calibrate import _cpu_model
        check_profile_machine(profile, profile_path, socket.gethostname(), _cpu_model(), "this machine")
    else:
        needs_disk = any(c.workload.dataset_bytes > 0 for c in configs)
        data_dir = configs[0].data.dir if needs_disk else None
        profile, _, reused = calibrate(address=address, recalibrate=recalibrate, data_dir=data_dir,
                                       with_disk=needs_disk, quick=quick_calibration,
                                       progress=lambda what: say(f"calibrating: {what}"))
        if reused:
            say("using the cached hardware profile")
    from testbed.deadlines import default_deadlines
    folder = run_experiment(spec, out=out, address=address, progress=progress, monitor_interval_s=monitor_interval_s,
                            deadlines=default_deadlines(configs, profile))
    save_profile(profile, folder.path / PROFILE_FILE)
    from testbed.report import write_report
    write_report(folder.path)
    return folder
