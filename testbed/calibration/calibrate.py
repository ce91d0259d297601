"""``testbed calibrate``: measure every figure the model's profile needs, and cache it.

Figures (docs/model.md says which term each feeds):

- ``actor_call_latency_s`` L: an empty call from one actor to another, round trip.
- ``transfer_bytes_per_s_local`` W: slope of an actor call's time against its argument's size.
- ``server_apply_bytes_per_s`` A: a shard's in-place apply, from its own apply events.
- ``server_call_overhead_s`` o: the shard's CPU per call beyond the apply (and pull copy).
- ``extra.server_copy_bytes_per_s`` C: the shard's parameter copy for a pull.
- ``extra.worker_cpu_*``, ``extra.server_cpu_*``: CPU per step of a real worker and shard.
- ``extra.actor_setup_s``: starting one more actor.
- ``flops_per_s``: float32 matmul rate inside an actor; ``cores_per_node``.
- ``disk``: the testbed's own direct reader in the data directory, and ``disk_reference``:
  the same measurements by fio (``testbed.calibration.disk``).

A profile is cached under the user's cache folder by the identity of what was measured
(hosts, cores, memory, CPU model, data directory); ``calibrate`` reuses a cached profile
whose identity matches and re-measures on ``recalibrate``.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import socket
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from testbed.config.errors import UserError
from testbed.model.profile import HardwareProfile, load_profile, save_profile
from testbed.records.atomic import atomic_write_text

__all__ = ["calibrate", "machine_identity", "identity_key", "cached_profile_path", "fit_line",
           "measure_ray_figures", "reusable_profile", "profile_cache_dir"]

def profile_cache_dir() -> Path:
    """Where profiles are cached: ``$TESTBED_CACHE_DIR/profiles``, by default under ~/.cache."""
    return Path(os.environ.get("TESTBED_CACHE_DIR", "~/.cache/ddnn-testbed")).expanduser() / "profiles"
Progress = Callable[[str], None]
# Bumped whenever what calibration measures changes, so that profiles cached by an older
# procedure are measured again instead of reused.
CALIBRATION_VERSION = 2
# The pause between calls while calibrating: a typical per-step compute time.
CALL_PAUSE_S = 0.005
# The compute time of the single-worker runs that measure CPU per step.
STEP_PAUSE_S = 0.02


def fit_line(x: list[float], y: list[float]) -> tuple[float, float]:
    """Least-squares intercept and slope of y = a + b x (pure; used for bandwidth fits)."""
    if len(x) < 2:
        raise ValueError("a line needs at least two points")
    b, a = np.polyfit(np.asarray(x, dtype=float), np.asarray(y, dtype=float), 1)
    return float(a), float(b)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_identity(nodes: list[dict[str, Any]], data_dir: Optional[str]) -> dict[str, Any]:
    """What a profile is valid for: the alive Ray nodes' addresses, CPUs and memory, the
    driver's CPU model, and the data directory measured. Node ids are left out: they change
    every time Ray starts."""
    alive = sorted(({"ip": n["NodeManagerAddress"], "cpus": int(n["Resources"].get("CPU", 0)),
                     "memory_gib": round(n["Resources"].get("memory", 0) / 2**30 / 4) * 4}
                    for n in nodes if n.get("Alive", True)), key=lambda d: (d["ip"], d["cpus"]))
    return {"host": socket.gethostname(), "cpu_model": _cpu_model(), "nodes": alive,
            "data_dir": str(Path(data_dir).expanduser()) if data_dir else None,
            "calibration": CALIBRATION_VERSION}


def identity_key(identity: dict[str, Any]) -> str:
    return hashlib.sha1(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]


def cached_profile_path(identity: dict[str, Any]) -> Path:
    return profile_cache_dir() / f"profile-{identity_key(identity)}.json"


def reusable_profile(path: Path, identity: dict[str, Any]) -> Optional[HardwareProfile]:
    """The profile cached at ``path`` if it was measured on ``identity``; None when there is
    none, it is corrupt (it is then measured again, not an error) or it is another machine's."""
    if not path.is_file():
        return None
    try:
        profile = load_profile(path)
    except UserError:
        return None
    return profile if profile.identity == identity else None


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def _measure_setup(echo_cls: Any, counts: tuple[int, ...], progress: Progress) -> dict[int, float]:
    """Seconds from asking for k new actors until all answer, for each k in ``counts``.

    Actor start-up is a process start each, a few at a time, and slows as more processes
    live: the curve, not one figure, predicts a config's setup."""
    import ray
    out = {}
    for k in counts:
        progress(f"actor start-up ({k} actors)")
        t0 = time.perf_counter()
        actors = [echo_cls.remote() for _ in range(k)]
        ray.get([a.cpu_s.remote() for a in actors])
        out[k] = time.perf_counter() - t0
        for a in actors:
            ray.kill(a)
        time.sleep(0.5)  # let the killed processes go before the next count
    return out


def _measure_calls(probe: Any, echo: Any, quick: bool, progress: Progress) -> dict[str, float]:
    """L (an empty call), and the object-store path: its fixed cost and bandwidth W."""
    import ray
    reps = 60 if quick else 200
    # Workers call the shards after a pause (their compute), and an actor call after a pause
    # costs more than one in a tight loop (threads park and must be woken): calibrate the way
    # workers call, and keep the tight-loop figure for reference.
    progress("actor-call latency")
    latency_s = _median(ray.get(probe.latency_s.remote(echo, reps // 2, CALL_PAUSE_S)))
    latency_hot_s = _median(ray.get(probe.latency_s.remote(echo, reps)))
    # Arguments above Ray's inline limit (100 KiB) go through the object store, which has a
    # fixed cost of its own on top of the call; fit time = L + L_store + bytes / W over sizes
    # that all take that path.
    progress("transfer bandwidth")
    sizes = [256 * 2**10, 2**20, 4 * 2**20, 16 * 2**20]
    sweep = ray.get(probe.transfer_sweep_s.remote(echo, sizes, 10 if quick else 30, CALL_PAUSE_S))
    times = [_median(sweep[n]) for n in sizes]
    intercept, slope = fit_line(sizes, times)
    return {"actor_call_latency_s": latency_s, "actor_call_latency_hot_s": latency_hot_s,
            "object_store_call_s": max(0.0, intercept - latency_s),
            "transfer_bytes_per_s_local": 1.0 / slope if slope > 0 else sizes[-1] / max(times[-1] - intercept, 1e-9),
            "transfer_points": dict(zip(map(str, sizes), times))}


def _measure_server(probe: Any, quick: bool, progress: Progress) -> dict[str, Any]:
    """A shard's apply bandwidth A, copy bandwidth C and per-call CPU overhead o, from a
    worker-like push/pull loop against a real shard (CPU per step: ``_measure_step_cpu``)."""
    import ray

    from actors.server import ServerActor
    from testbed.records.events import Phase, export_durations_ns

    progress("server apply and per-call overhead")
    rows = []
    for nbytes in (64 * 2**10, 4 * 2**20, 16 * 2**20):
        server = ray.remote(ServerActor).options(num_cpus=0, max_concurrency=4).remote(
            shard=0, lo=0, hi=nbytes // 4, seed=0, learning_rate=0.01, run_id="calibrate", config_id="calibrate",
            repeat=0)
        ray.get(server.ready.remote())
        steps = (40 if quick else 100) if nbytes < 2**20 else (15 if quick else 30)
        cpu0 = ray.get(server.__ray_call__.remote(lambda self: time.process_time()))
        loop = ray.get(probe.push_pull_loop.remote(server, nbytes, steps, CALL_PAUSE_S))
        cpu1 = ray.get(server.__ray_call__.remote(lambda self: time.process_time()))
        copy_s = ray.get(server.__ray_call__.remote(_time_copy))
        export = ray.get(server.events.remote())
        ray.kill(server)
        durations = np.asarray(export_durations_ns(export, Phase.APPLY), dtype=float)
        rows.append({"bytes": nbytes, "apply_s": float(np.median(durations[-steps:])) / 1e9, "copy_s": copy_s,
                     "server_cpu_per_step_s": (cpu1 - cpu0) / (steps + 1), **loop})
    sizes = [r["bytes"] for r in rows]
    _, apply_slope = fit_line(sizes, [r["apply_s"] for r in rows])
    _, copy_slope = fit_line(sizes, [r["copy_s"] for r in rows])
    small = rows[0]
    # Two calls per step (a push and a pull); what the shard's CPU spends beyond the apply and
    # the copy is the per-call overhead.
    overhead_s = max(0.0, (small["server_cpu_per_step_s"] - small["apply_s"] - small["copy_s"]) / 2)
    return {
        "server_apply_bytes_per_s": 1.0 / apply_slope if apply_slope > 0 else rows[-1]["bytes"] / rows[-1]["apply_s"],
        "server_copy_bytes_per_s": 1.0 / copy_slope if copy_slope > 0 else rows[-1]["bytes"] / rows[-1]["copy_s"],
        "server_call_overhead_s": overhead_s,
        "rows": rows,
    }


def _measure_step_cpu(quick: bool, progress: Progress) -> dict[str, float]:
    """CPU per step of a real worker and a real shard, from single-worker runs of the testbed
    itself (sleep compute between steps, as a worker computes): the CPU centre's demand.

    Probes in a tight loop undercount it: a process that sleeps between calls pays again to
    wake its threads, and the real actors also produce gradients and record events."""
    from testbed.config.spec import expand, parse_spec
    from testbed.runner.run import run_config

    steps = 15 if quick else 30
    rows = []
    for nbytes in (64 * 2**10, 2**20, 4 * 2**20):
        progress(f"CPU per step of a worker and a shard ({nbytes // 1024} KiB gradients)")
        cfg = expand(parse_spec({"name": "calibrate", "gradient_bytes": nbytes, "workload": {"steps": steps},
                                 "compute": {"mode": "sleep", "seconds": STEP_PAUSE_S}}))[0]
        cpu = run_config(cfg, 0, "calibrate").train_cpu_s
        rows.append((nbytes, cpu["worker-0"] / steps, cpu["server-0"] / steps))
    sizes = [r[0] for r in rows]
    w0, w_slope = fit_line(sizes, [r[1] for r in rows])
    s0, s_slope = fit_line(sizes, [r[2] for r in rows])
    return {"worker_cpu_per_step_s": max(w0, rows[0][1] / 2), "worker_cpu_bytes_per_s": 1.0 / w_slope if w_slope > 0 else 0.0,
            "server_cpu_per_step_s": max(s0, rows[0][2] / 2), "server_cpu_bytes_per_s": 1.0 / s_slope if s_slope > 0 else 0.0}


def measure_ray_figures(progress: Progress = lambda s: None, *, quick: bool = False) -> dict[str, Any]:
    """Measure the Ray-side figures on the Ray this process is connected to."""
    import ray

    from actors.probe import Echo, Probe

    probe_cls = ray.remote(Probe).options(num_cpus=0)
    echo_cls = ray.remote(Echo).options(num_cpus=0)
    probe, echo = probe_cls.remote(), echo_cls.remote()
    ray.get([probe.cpu_s.remote(), echo.cpu_s.remote()])
    calls = _measure_calls(probe, echo, quick, progress)
    server = _measure_server(probe, quick, progress)
    progress("matmul FLOP rate and gradient production")
    flops = ray.get(probe.matmul_flops_per_s.remote(384))
    fill_bps = ray.get(probe.fill_bytes_per_s.remote(16 * 2**20))
    for a in (probe, echo):
        ray.kill(a)
    from actors.probe import StartupProbe
    step_cpu = _measure_step_cpu(quick, progress)
    setup = _measure_setup(ray.remote(StartupProbe).options(num_cpus=0), (2, 4) if quick else (2, 8, 16),
                           progress)
    (k0, t0), (k1, t1) = list(setup.items())[0], list(setup.items())[-1]
    return {
        "actor_call_latency_s": calls["actor_call_latency_s"],
        "transfer_bytes_per_s_local": calls["transfer_bytes_per_s_local"],
        "server_apply_bytes_per_s": server["server_apply_bytes_per_s"],
        "server_call_overhead_s": server["server_call_overhead_s"],
        "flops_per_s": flops,
        "setup_s_by_actors": setup,
        "extra": {
            "object_store_call_s": calls["object_store_call_s"],
            "actor_call_latency_hot_s": calls["actor_call_latency_hot_s"],
            "server_copy_bytes_per_s": server["server_copy_bytes_per_s"],
            **step_cpu,
            "gradient_fill_bytes_per_s": fill_bps,
            "actor_setup_s": (t1 - t0) / (k1 - k0),
        },
        "details": {"server": server["rows"], "transfer": calls["transfer_points"]},
    }


def _time_copy(actor: Any) -> float:
    """Median time of the shard copying its parameters (what a pull costs it)."""
    w = actor.server.w
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        w.copy()
        times.append(time.perf_counter() - t0)
    return float(statistics.median(times))


def calibrate(*, address: Optional[str] = None, out: Optional[Path] = None, recalibrate: bool = False,
              data_dir: Optional[str] = None, with_disk: bool = True, quick: bool = False,
              progress: Progress = lambda s: None) -> tuple[HardwareProfile, Path, bool]:
    """Calibrate (or reuse the cached profile for this machine); returns (profile, path, reused)."""
    import ray

    from testbed.config.spec import DEFAULT_DATA_DIR
    from testbed.runner.cluster import ray_session

    data_dir = data_dir or DEFAULT_DATA_DIR
    with ray_session(address):
        nodes = ray.nodes()
        identity = machine_identity(nodes, data_dir if with_disk else None)
        cache = cached_profile_path(identity)
        profile = None if recalibrate else reusable_profile(cache, identity)
        if profile is not None:
            if out and Path(out) != cache:
                save_profile(profile, out, atomic_write_text)
            return profile, Path(out) if out else cache, True
        figures = measure_ray_figures(progress, quick=quick)
    disk = reference = None
    if with_disk:
        from testbed.calibration.disk import calibrate_disk
        from testbed.data.fio import FioNotFound, find_fio
        target = Path(data_dir).expanduser()
        try:
            target.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UserError(f"cannot create the data directory {target} ({err.strerror}); "
                            f"give a writable one with --data-dir") from None
        size = (64 if quick else 512) * 2**20
        runtime_s = 0.5 if quick else 1.0
        # The model is fed what the testbed's own reader gets from the disk; fio measures the
        # same access pattern for reference (on some virtual disks fio's psync buffers are
        # slower than the reader's huge-page buffer, see docs/model.md).
        progress("disk (the testbed's reader)")
        disk = calibrate_disk(target, file_bytes=size, runtime_s=runtime_s, max_jobs=8, method="reader",
                              progress=progress)
        try:
            find_fio()
        except FioNotFound as err:
            progress(str(err))
        else:
            progress("disk (fio, for reference)")
            reference = calibrate_disk(target, file_bytes=size, runtime_s=runtime_s, max_jobs=8, method="fio",
                                       progress=progress)
    cores = min((n["cpus"] for n in identity["nodes"]), default=os.cpu_count() or 1)
    extra = dict(figures["extra"], nodes=float(len(identity["nodes"])))
    profile = HardwareProfile(
        identity=identity, cores_per_node=max(1, cores),
        server_apply_bytes_per_s=figures["server_apply_bytes_per_s"],
        server_call_overhead_s=figures["server_call_overhead_s"],
        actor_call_latency_s=figures["actor_call_latency_s"],
        transfer_bytes_per_s_local=figures["transfer_bytes_per_s_local"],
        flops_per_s=figures["flops_per_s"], disk=disk, disk_reference=reference, extra=extra,
        setup_s_by_actors=figures["setup_s_by_actors"],
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    save_profile(profile, cache, atomic_write_text)
    if out:
        save_profile(profile, out, atomic_write_text)
    return profile, Path(out) if out else cache, False
