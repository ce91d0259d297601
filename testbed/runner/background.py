"""The CPU Ray's own processes take while a config trains, on the driver's node.

A local run starts, besides the run's actors, Ray's GCS, raylet, dashboard (API server),
dashboard agent, runtime-env agent, log monitor, autoscaler monitor and idle worker
processes. They share the cores with the emulation, so their CPU during the train phase
is recorded with each config (manifest ``finished[].ray_background_cpu_s``): a busy
background is a reason for a slower step, not the testbed's emulation.

Ray 2.60's ``ray.init`` can leave out the dashboard's UI (``include_dashboard=False``, which
``testbed.runner.cluster`` passes) but not the rest: the log monitor, the autoscaler monitor
and the agents are started with every local instance (``ray start`` has no flag for the
agents either), hence this measurement rather than a leaner start.

Which processes: those whose command line names the Ray session (GCS, raylet, monitors,
dashboard) and every descendant of them (agents, worker processes), minus the processes
given (the run's actors) and the testbed's own node monitors. Only the driver's node is
visible; on a cluster the other nodes' background is not counted.
"""

from __future__ import annotations

from typing import Iterable, Optional

import psutil

__all__ = ["session_name", "background_processes", "cpu_snapshot", "cpu_between"]

# Actors of the testbed that are not part of a config (Ray names a worker process ray::<class>).
_TESTBED_ACTORS = ("ray::MonitorActor",)


def session_name() -> Optional[str]:
    """The Ray session this driver is connected to, or None (Ray not initialised)."""
    try:
        import ray
        node = ray._private.worker._global_node  # the session this driver started or joined
        return node.session_name if node is not None else None
    except Exception:  # noqa: BLE001 - Ray internals differ between versions: no figure, no failure
        return None


def background_processes(session: str, exclude_pids: Iterable[int] = ()) -> list[psutil.Process]:
    """Ray's processes of ``session`` on this machine, without ``exclude_pids`` and this process."""
    roots = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if session in " ".join(proc.info["cmdline"] or []):
                roots.append(proc)
        except (psutil.Error, TypeError):
            continue
    found: dict[int, psutil.Process] = {}
    for root in roots:
        found[root.pid] = root
        try:
            found.update({c.pid: c for c in root.children(recursive=True)})
        except psutil.Error:
            continue
    skip = set(exclude_pids) | {psutil.Process().pid}
    out = []
    for pid, proc in found.items():
        try:
            if pid not in skip and proc.name() not in _TESTBED_ACTORS:
                out.append(proc)
        except psutil.Error:
            continue
    return out


def _label(proc: psutil.Process) -> str:
    """A process's name; for Ray's Python services the script's (``log_monitor.py``, ``monitor.py``)."""
    name = proc.name()
    if name.startswith("python"):
        scripts = [a for a in proc.cmdline()[1:] if a.endswith(".py")]
        return scripts[0].rsplit("/", 1)[-1] if scripts else name
    return name


def cpu_snapshot(processes: Iterable[psutil.Process]) -> dict[int, tuple[str, float]]:
    """pid -> (process label, CPU seconds so far: user + system)."""
    out = {}
    for proc in processes:
        try:
            with proc.oneshot():
                times = proc.cpu_times()
                out[proc.pid] = (_label(proc), times.user + times.system)
        except psutil.Error:
            continue
    return out


def cpu_between(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds per process name between two snapshots (processes started in between count
    from zero; processes of the same name add up; one that ended in between is lost)."""
    out: dict[str, float] = {}
    for pid, (name, cpu) in after.items():
        start = before.get(pid, (name, 0.0))[1]
        out[name] = out.get(name, 0.0) + max(0.0, cpu - start)
    return dict(sorted(out.items()))
