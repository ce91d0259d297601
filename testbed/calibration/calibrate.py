"""``testbed calibrate``: measure every figure the model's profile needs, and cache it.

Figures (docs/model.md says which term each feeds):

- ``call_costs``: per-call cost curves over gradient sizes 4 KiB..32 MiB at 1 and 2 shards,
  from single-worker runs of the testbed itself (``testbed.calibration.costs``).
- ``reference_curves``: the same sizes through an actor call, an object-store put and get,
  and a copy (``actors.probe``), for reference.
- ``actor_call_latency_s`` L: an empty call from one actor to another, round trip.
- ``transfer_bytes_per_s_local`` W, ``object_store_call_s``: a line through the calls
  carrying the sizes that take the object store.
- ``server_apply_bytes_per_s`` A, ``server_call_overhead_s`` o, ``server_copy_bytes_per_s``
  C: scalar figures read off the curves (the model reads the curves when present).
- ``actor_setup_s``, ``setup_s_by_actors``: starting actors.
- ``flops_per_s``: float32 matmul rate inside an actor; ``cores_per_node``.
- ``disk``: the testbed's own direct reader in the data directory, and ``disk_reference``:
  the same measurements by fio (``testbed.calibration.disk``).
- ``step_reads``: direct reads after pauses, in an actor, as workers read their step input
  (``testbed.calibration.reads``).

A profile is cached under the user's cache folder by the identity of what was measured
(hosts, cores, memory, CPU model, data directory); ``calibrate`` reuses a cached profile
whose identity matches and re-measures on ``recalibrate``.
"""

from __future__ import annotations

import dataclasses
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

from testbed.calibration.costs import (
    BEYOND_LARGE_BYTES,
    BEYOND_LARGER_BYTES,
    SIZES_BYTES,
    init_call_from_points,
    measure_call_costs,
    measure_small_calls,
    plain_pull_step_from_points,
    push_return_from_points,
    ray_cpu_from_points,
    ray_cpu_shard_step_from_points,
)
from testbed.config.errors import UserError
from testbed.model.curves import CallCosts, ReferenceCurves, SizeCurve
from testbed.model.profile import HardwareProfile, load_profile, save_profile
from testbed.model.terms import INLINE_BYTES
from testbed.records.atomic import atomic_write_text

__all__ = ["calibrate", "call_cpu_figures", "machine_identity", "identity_key", "cached_profile_path", "fit_line",
           "measure_ray_figures", "reusable_profile", "profile_cache_dir"]


def profile_cache_dir() -> Path:
    """Where profiles are cached: ``$TESTBED_CACHE_DIR/profiles``, by default under ~/.cache."""
    return Path(os.environ.get("TESTBED_CACHE_DIR", "~/.cache/ddnn-testbed")).expanduser() / "profiles"
Progress = Callable[[str], None]
# Bumped whenever what calibration measures changes, so that profiles cached by an older
# procedure are measured again instead of reused.
# 3: per-call cost curves across sizes and shard counts (costs.py); 4: init call; 5: Ray CPU;
# 6: the curves are the events' plain means, tails included (costs._mean says why), and the
# init call to k worker processes; 7: step reads after pauses (reads.py); 8: the scheduler under load
# (scheduler.py); 9: the worker's calls at 4 shards at the smallest size (costs.measure_small_calls);
# 10: the shard answers pulls from reused buffers (actors/server.py ``_reply_copy``), which
# changes what a pull costs it; 11: random 4 KiB reads by 2, 4, 8 readers at once (disk.py), the
# rate at which the simulated disk serves concurrent random step reads; 12: the per-call sweep's
# runs share their processes (``testbed.runner.run.ReusedActors``), and fewer samples of the
# step reads and the scheduler (the calibration within its 90 s); 13: the callee's CPU per bare
# actor call, after a pause and queued (``call_cpu_figures``: the simulated ssp step clock);
# 14: the caller's CPU for the paused calls (``actor_caller_cpu_s``: a worker's side of its tick);
# 15: a plain push's answer (``push_return_s``, from the sweep's runs: no new run); 16: the step
# to 4 shards from a pair of runs made back to back (``costs.paired_small_calls``); 17: the same
# pair at 2 MiB, whose 4-shard slices go through the object store (``large_calls_by_shards``);
# 18: the start-up curve at 2 and 16 actors, the fan-out to 8 on half of the 16 (``_measure_setup``)
# 19: the I/O gate of a sequential init at 1, 4 and 16 workers (``_measure_gate``)
# 20: a run per size whose pulls are calls of their own (``costs.plain_pull_step_from_points``)
# 21: Ray's own CPU per step for each shard beyond the first (``costs.ray_cpu_shard_step_from_points``,
# from the sweep's runs: no new run); 22: that step from the raylet's own CPU (the agents' CPU a
# second moved it by +-1.5 ms a step); 23: the pair at 16 MiB too (``larger_calls_by_shards``:
# the step past the inline limit grows with the slice); 24: how late a 4 ms sleep ends at rest
# (``SchedulerCosts.sleep_overshoot_s``: an emulated apply's sleep ends that late); 25: the first
# wake after a spin apart from the next ones (``SchedulerCosts.wake_first_s``; same probe, same time);
# 26: more of the gate's pairs at 1 and 4 workers (``gate_repeats``); 27: the disk's first read
# after idle (``DiskProfile.read_start_s``, ``disk.measure_read_start``); 28: the step reader's own
# work once per step read (``StepReadCosts.step_overhead_s``), and 200 back-to-back reads a cell;
# 29: a reply to a caller held waiting (``SchedulerCosts.reply_wake_s``); 30: the runs' shards touch
# a reply buffer for every thread of their pool (``runner.run.shard_reply_buffers``): the large
# pulls of the per-call runs no longer hold a thread's first allocation; 31: the init call to
# processes hosting several workers each (``init_hosted_s_by_workers``, ``_measure_hosted``); 32: the
# scheduler's probe takes 20 samples a load, not 10 (``calibration.scheduler.SAMPLES``); 33: the init
# call is the median of the sweep's runs that started a process (``costs.init_call_from_points``);
# 34: the plain pull's step at 4 shards at the smallest size (``costs.plain_pull_step_beyond``)
CALIBRATION_VERSION = 34
# A reply to a caller the callee held waiting (``SchedulerCosts.reply_wake_s``): the holds, and
# calls per hold (~0.8 s in all).
REPLY_HOLDS_S = (0.0, 0.002, 0.005, 0.01, 0.02)
REPLY_REPEATS = 9
# The pause between calls while calibrating: a typical per-step compute time.
CALL_PAUSE_S = 0.005


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


# A 1-minute load average at or above this per core when calibration starts draws a warning.
BUSY_LOAD_PER_CORE = 0.5


def _load_1m() -> Optional[float]:
    """This machine's 1-minute load average (None where the platform has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _node_cores(identity: dict[str, Any]) -> int:
    """Cores of the smallest node (what the model takes for every node)."""
    return max(1, int(min((n["cpus"] for n in identity["nodes"]), default=os.cpu_count() or 1)))


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def _measure_setup(echo_cls: Any, counts: tuple[int, ...], progress: Progress,
                   fanout_counts: tuple[int, ...] = (),
                   gate_counts: tuple[int, ...] = (),
                   hosted: Optional[tuple[int, tuple[int, ...]]] = None) -> tuple[dict[int, float], dict[int, float],
                                                                                  dict[int, float], dict[str, Any]]:
    """Seconds from asking for k new actors until all answer, for each k in ``counts``; and,
    once they are up and idle, the median of a few calls to j of them at once, for each j in
    ``counts`` and ``fanout_counts`` (the init phase's call to the worker processes when there
    is nothing to read), each j on the first batch of at least j.

    Actor start-up is a process start each, a few at a time, and slows as more processes
    live: the curve, not one figure, predicts a config's setup. Why the fan-out on part of a
    batch: starting 8 actors only to call them took ~6 s of the calibration's 90, and the
    start-up curve is straight between 2 and 16 here (8 at once: 3.25 s measured, 3.25 s read
    between 0.83 s at 2 and 6.48 s at 16, on 2026-12-03), while the fan-out is not (6.2 ms to 8,
    where the line says 5.3).

    On the last batch, the I/O gate's cost for ``gate_counts`` (``_measure_gate``), and with
    ``hosted`` = (processes, thread counts) what hosting several workers adds to the init call
    (``_measure_hosted``; {} without)."""
    import ray
    setup, fanout, gate, hosting = {}, {}, {}, {}
    wanted = sorted(set(counts) | set(fanout_counts))
    for k in counts:
        progress(f"actor start-up ({k} actors)")
        t0 = time.perf_counter()
        actors = [echo_cls.remote() for _ in range(k)]
        ray.get([a.cpu_s.remote() for a in actors])
        setup[k] = time.perf_counter() - t0
        for j in (j for j in wanted if j <= k and j not in fanout):
            calls = []
            for _ in range(7):
                time.sleep(0.05)  # idle first, as the worker processes are when init starts
                t0 = time.perf_counter()
                ray.get([a.cpu_s.remote() for a in actors[:j]])
                calls.append(time.perf_counter() - t0)
            fanout[j] = _median(calls)
        if k == counts[-1] and gate_counts:
            progress(f"the I/O gate's hand-off ({', '.join(map(str, gate_counts))} actors)")
            gate = _measure_gate(actors, [j for j in gate_counts if j <= k])
        if k == counts[-1] and hosted is not None:
            processes, threads = hosted
            progress(f"the init call to processes hosting {', '.join(map(str, threads))} workers each")
            hosting = _measure_hosted(actors, processes, threads)
        for a in actors:
            ray.kill(a)
        time.sleep(0.5)  # let the killed processes go before the next count
    return setup, fanout, gate, hosting


# Calls to each group of probes in the hosted-workers measurement (the median of each group's),
# and the workers a probe hosts in each group beyond the single-worker one: two (the fewest a
# host hands out to threads) and eight (32 sleeping workers on two cores); ~2 s in all.
HOSTED_ROUNDS = 9
HOSTED_THREADS = (2, 8)


def _measure_hosted(actors: list[Any], processes: int, threads: tuple[int, ...]) -> dict[str, Any]:
    """What hosting t workers in each of the init call's worker processes adds to that call
    with nothing to read, for each t in ``threads``: groups of ``processes`` idle probes, one
    hosting a single worker (run inline, as a host of one runs it) and one per t hosting t
    (a started thread each, ``actors.host.VirtualWorkers``), called in turn over
    ``HOSTED_ROUNDS`` rounds, 50 ms idle before each call; per t the median call less the
    single-worker group's, never below 0. ``processes`` is cut to what the probes allow
    (``len(actors)`` over the groups) and returned with the figures:
    {"processes": p, "by_threads": {t: seconds}}.

    Why: a worker process hosting several workers (``sleep`` compute, about two processes a
    core) hands the call to a thread per worker and waits for them all, which the fan-out to
    bare probes never does. The held-out draws of 2026-12-05 (19:00-21:00) measured the inits
    with nothing to read of 8-32 sleeping workers (4 processes) 1.0-1.5 x their prediction,
    growing with the workers per process; side by side in one session (2026-12-05, 4 processes
    on 2 cores) one worker a process answered in 2.7-3.0 ms, two to eight in 3.2-3.8 ms."""
    import ray
    groups = 1 + len(threads)
    p = max(1, min(processes, len(actors) // groups))
    ray.get([a.host_workers.remote(n) for n, g in zip((1, *threads), range(groups)) for a in actors[g * p:(g + 1) * p]])
    calls: list[list[float]] = [[] for _ in range(groups)]
    for r in range(HOSTED_ROUNDS):
        for g in [(r + i) % groups for i in range(groups)]:  # each group first in turn
            time.sleep(0.05)  # idle first, as the worker processes are when init starts
            t0 = time.perf_counter()
            ray.get([a.init_hosted.remote() for a in actors[g * p:(g + 1) * p]])
            calls[g].append(time.perf_counter() - t0)
    one = _median(calls[0])
    return {"processes": p, "by_threads": {t: max(0.0, _median(c) - one) for t, c in zip(threads, calls[1:])}}


# Sequential inits timed per count of workers at the gate (paired with a plain call each).
GATE_REPEATS = 3


def gate_repeats(workers: int) -> int:
    """Pairs timed at ``workers`` workers at the gate: 7 at one, 5 up to four, else
    ``GATE_REPEATS``. Why more where a pair is cheap: a pair at one worker is two calls of 2-6 ms
    whose difference is the figure, and its first pair meets the fresh gate (a connection, the
    first turn: 5.7-18 ms where the next pairs took 2.7-4.4, three rounds on 2026-12-05); with
    three pairs the median was that first pair or a spike often enough to matter: the calibration
    of 2026-12-05 00:07 read 11.2 ms at one worker (12.5 at four), where the one-worker
    sequential inits of the day's draws took 4.3-7.5 ms beyond their read and call. Seven pairs
    at one worker and five at four add ~0.7 s."""
    return 7 if workers <= 1 else 5 if workers <= 4 else GATE_REPEATS


def _measure_gate(actors: list[Any], counts: list[int]) -> dict[int, float]:
    """What a sequential init's I/O gate adds to the init call with nothing to read, for j
    workers: the median over ``gate_repeats(j)`` pairs of (the driver's call to j idle actors that
    each take the gate's token in turn and hand it on) less (a plain call to the same j),
    made one after the other so that the pair sees the same machine.

    Why measured, not two call latencies a worker (the rule before): a turn is a call to take
    the token that waits at the gate, the gate's threads woken on every hand-off, and a call to
    hand it on; on the seven held-out draws of 2026-12-03 the 42 sequential inits measured
    2-4 ms between one worker's read and the next one's (median ~3) and 3-5 ms before the first
    read and after the last, against 1.7 ms a worker predicted: init 23 % short at the median.
    One gate serves every repeat and count, each turn under an index of its own. Pairs at 1, 4
    and 16 (``gate_repeats``; five at 1, 2, 8 and 16 took 5 s of the calibration's 90 here); the curve grows
    faster than linearly (every hand-off wakes the gate's waiting threads), so it keeps its
    largest count."""
    import ray

    from actors.gate import remote_gate
    order = list(range(sum(j * gate_repeats(j) for j in counts)))
    gate = remote_gate(order)
    ray.get(gate.done.remote())  # its process up before anything is timed, as in a run
    diffs: dict[int, list[float]] = {j: [] for j in counts}
    base = 0
    for r in range(max(gate_repeats(j) for j in counts)):
        for j in (j for j in counts if r < gate_repeats(j)):
            time.sleep(0.05)  # idle first, as the worker processes are when init starts
            t0 = time.perf_counter()
            ray.get([a.cpu_s.remote() for a in actors[:j]])
            plain = time.perf_counter() - t0
            time.sleep(0.05)
            t0 = time.perf_counter()
            ray.get([a.gate_pass.remote(gate, base + i) for i, a in enumerate(actors[:j])])
            diffs[j].append(time.perf_counter() - t0 - plain)
            base += j
    ray.kill(gate)
    return {j: max(0.0, _median(d)) for j, d in diffs.items()}


# Calls at once in the queued series (they wait for each other at the callee).
QUEUED_IN_FLIGHT = 8


def call_cpu_figures(paused: tuple[float, float], paused_calls: int, queued: tuple[float, float],
                     queued_calls: int, caller: Optional[tuple[float, float]] = None) -> dict[str, float]:
    """The callee's CPU per call from its CPU clock around a series of calls after a pause and
    one of queued calls (each count plus the one call that read the clock at the end; pure).

    Why both: a Ray actor's CPU per call depends on whether it idles between calls. On the
    2-core VM (a bare 4 KiB call): an idle actor process burns 14 ms of CPU a second, a call
    every 25 ms cost it 1.52 ms, back to back 0.59, eight in flight 0.36. The simulated step
    clock takes the first for a tick that finds it idle and the second for one that queues.

    ``caller``: the calling process's CPU clock around the paused series, the caller's CPU per
    call (``actor_caller_cpu_s``: a worker's own side of its tick; 1.3-2.1 ms against the
    callee's 1.1-1.6 ms on the 2-core VM of 2026-12-02, a round trip of 2.0-3.1 ms)."""
    def per_call(clock: tuple[float, float], calls: int) -> float:
        return max(0.0, clock[1] - clock[0]) / max(1, calls + 1)
    out = {"actor_call_cpu_s": per_call(paused, paused_calls),
           "actor_call_cpu_busy_s": per_call(queued, queued_calls)}
    if caller is not None:
        out["actor_caller_cpu_s"] = per_call(caller, paused_calls)
    return out


def _measure_calls(probe: Any, echo: Any, quick: bool, progress: Progress) -> dict[str, Any]:
    """L (an empty call), the object-store path's fixed cost and bandwidth W, and the
    reference curves: a call carrying each calibrated size, a put and a get, a copy."""
    import ray
    reps = 60 if quick else 200
    # Workers call the shards after a pause (their compute), and an actor call after a pause
    # costs more than one in a tight loop (threads park and must be woken): calibrate the way
    # workers call, and keep the tight-loop figure for reference.
    progress("actor-call latency")
    # The callee's CPU too, around each series: per call after a pause, and per call queued.
    cpu0, caller0 = ray.get([echo.cpu_s.remote(), probe.cpu_s.remote()])
    latency_s = _median(ray.get(probe.latency_s.remote(echo, reps // 2, CALL_PAUSE_S)))
    cpu1, caller1 = ray.get([echo.cpu_s.remote(), probe.cpu_s.remote()])
    latency_hot_s = _median(ray.get(probe.latency_s.remote(echo, reps)))
    cpu2 = ray.get(echo.cpu_s.remote())
    queued = ray.get(probe.queued_calls.remote(echo, reps // QUEUED_IN_FLIGHT, QUEUED_IN_FLIGHT))
    cpu3 = ray.get(echo.cpu_s.remote())
    call_cpu = call_cpu_figures((cpu0, cpu1), reps // 2, (cpu2, cpu3), queued, (caller0, caller1))
    progress("transfers, object store and copies across sizes")
    sizes = list(SIZES_BYTES)
    sweep = ray.get(probe.transfer_sweep_s.remote(echo, sizes, 6 if quick else 15, CALL_PAUSE_S))
    times = {n: _median(sweep[n]) for n in sizes}
    # Arguments above Ray's inline limit (100 KiB) go through the object store, which has a
    # fixed cost of its own on top of the call; fit time = L + L_store + bytes / W over sizes
    # that all take that path (the scalar figures of profiles without curves).
    big = [n for n in sizes if n > INLINE_BYTES]
    intercept, slope = fit_line(big, [times[n] for n in big])
    store = ray.get(probe.store_sweep_s.remote(echo, sizes, 3 if quick else 7))
    copies = ray.get(probe.copy_s.remote(sizes))
    reference = ReferenceCurves(
        transfer_s=SizeCurve(tuple(times.items())),
        store_put_s=SizeCurve(tuple((n, _median([p for p, _ in store[n]])) for n in sizes)),
        store_get_s=SizeCurve(tuple((n, _median([g for _, g in store[n]])) for n in sizes)),
        copy_s=SizeCurve(tuple(copies.items())))
    return {"actor_call_latency_s": latency_s, "actor_call_latency_hot_s": latency_hot_s, **call_cpu,
            "object_store_call_s": max(0.0, intercept - latency_s),
            "transfer_bytes_per_s_local": 1.0 / slope if slope > 0 else big[-1] / max(times[big[-1]] - intercept, 1e-9),
            "reference_curves": reference}


def _scalar_server_figures(costs: CallCosts, reference: ReferenceCurves) -> dict[str, float]:
    """Schema 1's scalar server figures, read off the one-shard curves (kept for tables and
    for code that reads them): A from the apply curve's two largest sizes, o as the shard's
    CPU per push beyond the apply at the smallest size, C from the copy curve."""
    (b0, a0), (b1, a1) = costs.apply_s.points[-2:]
    (c0, t0), (c1, t1) = reference.copy_s.points[-2:]
    return {"server_apply_bytes_per_s": (b1 - b0) / (a1 - a0) if a1 > a0 else b1 / max(a1, 1e-9),
            "server_copy_bytes_per_s": (c1 - c0) / (t1 - t0) if t1 > t0 else c1 / max(t1, 1e-9),
            "server_call_overhead_s": costs.dispatch_fixed_s()}


def measure_ray_figures(progress: Progress = lambda s: None, *, quick: bool = False, cores: int = 1) -> dict[str, Any]:
    """Measure the Ray-side figures on the Ray this process is connected to: keyword
    arguments of ``HardwareProfile`` (all but identity, cores and disk) and ``details``.
    ``cores``: the smallest node's (where the hosted workers' hand-out is measured at the
    process count the runner makes for sleeping workers, ``PROCESSES_PER_CORE`` a core)."""
    import ray

    from actors.probe import Echo, Probe, StartupProbe

    probe_cls = ray.remote(Probe).options(num_cpus=0)
    echo_cls = ray.remote(Echo).options(num_cpus=0)
    probe, echo = probe_cls.remote(), echo_cls.remote()
    ray.get([probe.cpu_s.remote(), echo.cpu_s.remote()])
    calls = _measure_calls(probe, echo, quick, progress)
    progress("a reply to a caller held waiting")
    from testbed.calibration.scheduler import reply_wake_from_calls
    held = ray.get(probe.held_calls_s.remote(echo, list(REPLY_HOLDS_S), 3 if quick else REPLY_REPEATS, CALL_PAUSE_S))
    calls["reply_wake_s"] = reply_wake_from_calls(held)
    progress("matmul FLOP rate and gradient production")
    flops = ray.get(probe.matmul_flops_per_s.remote(384))
    fill_bps = ray.get(probe.fill_bytes_per_s.remote(16 * 2**20))
    for a in (probe, echo):
        ray.kill(a)
    from testbed.runner.run import ReusedActors
    # The sweep's runs share their processes (a start per actor and run was a third of the
    # sweep's time; the figures are the same within the run-to-run spread: docs/model.md).
    with ReusedActors() as reuse:
        costs, points = measure_call_costs(quick, progress, reuse)
        small_calls = measure_small_calls(costs, quick, progress, reuse)
        large_calls = measure_small_calls(costs, quick, progress, reuse, size=BEYOND_LARGE_BYTES)
        larger_calls = measure_small_calls(costs, quick, progress, reuse, size=BEYOND_LARGER_BYTES)
    from testbed.emulation.hosting import PROCESSES_PER_CORE
    setup, fanout, gate, hosting = _measure_setup(ray.remote(StartupProbe).options(num_cpus=0),
                                                  (2, 4) if quick else (2, 16), progress,
                                                  fanout_counts=() if quick else (8,),
                                                  gate_counts=(1, 2, 4) if quick else (1, 4, 16),
                                                  hosted=(PROCESSES_PER_CORE * max(1, cores), HOSTED_THREADS))
    (k0, t0), (k1, t1) = list(setup.items())[0], list(setup.items())[-1]
    one_shard = costs[0]
    return {
        **calls, **_scalar_server_figures(one_shard, calls["reference_curves"]),
        "flops_per_s": flops, "gradient_fill_bytes_per_s": fill_bps,
        "setup_s_by_actors": setup, "actor_setup_s": (t1 - t0) / (k1 - k0),
        "init_fanout_s_by_actors": fanout, "init_gate_s_by_workers": gate,
        "init_hosted_s_by_workers": hosting.get("by_threads", {}), "init_hosted_processes": hosting.get("processes", 0),
        "call_costs": costs, "small_calls_by_shards": small_calls,
        "large_calls_by_shards": large_calls, "large_calls_bytes": BEYOND_LARGE_BYTES,
        "larger_calls_by_shards": larger_calls, "larger_calls_bytes": BEYOND_LARGER_BYTES,
        "init_call_s": init_call_from_points(points),
        "ray_cpu_per_step_s": ray_cpu_from_points(points), "ray_cpu_shard_step_s": ray_cpu_shard_step_from_points(points),
        "push_return_s": push_return_from_points(points),
        "plain_pull_step_s": plain_pull_step_from_points(points),
        "details": {"runs": [dataclasses.asdict(p) for p in points]},
    }


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
        load_start = _load_1m()
        if load_start is not None and load_start >= BUSY_LOAD_PER_CORE * (os.cpu_count() or 1):
            progress(f"warning: the machine is busy (load average {load_start:.1f} on {os.cpu_count()} cores): "
                     f"figures measured now come out slow; calibrate again on a quiet machine with --recalibrate")
        step_reads = None
        if with_disk:
            from testbed.calibration.reads import measure_step_reads
            from testbed.data.dataset import check_cache_bypass
            # In an actor, while Ray is up: a step read is a worker's, after a pause. First,
            # before the start-up figures leave a crowd of exiting processes behind. A memory-
            # backed data directory is refused here as the disk calibration below refuses it.
            _, bypass = check_cache_bypass(data_dir, allow_cached=False)
            step_reads = measure_step_reads(data_dir, quick=quick, cache_bypass=bypass, progress=progress)
        figures = measure_ray_figures(progress, quick=quick, cores=_node_cores(identity))
        figures["step_reads"] = step_reads
        from testbed.calibration.scheduler import measure_scheduler
        figures["scheduler"] = measure_scheduler(_node_cores(identity), quick=quick, progress=progress)
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
        # One file for both measurements: fio reads the file the reader read.
        name = f".calibrate-{os.getpid()}.bin"
        try:
            disk = calibrate_disk(target, file_bytes=size, runtime_s=runtime_s, max_jobs=8, method="reader",
                                  progress=progress, file_name=name, keep_file=True)
            try:
                find_fio()
            except FioNotFound as err:
                progress(str(err))
            else:
                progress("disk (fio, for reference)")
                # 0.3 s a job count (the reader's take 1 s): the reference is shown beside the
                # reader's figures, not fed to the model (1.3 s a job count at 1 s with fio's
                # start-up, 0.8 s at 0.5 s, ~0.6 s at 0.3 s: the room for the plain-pull runs).
                reference = calibrate_disk(target, file_bytes=size, runtime_s=min(runtime_s, 0.3), max_jobs=8,
                                           method="fio", progress=progress, file_name=name, read_start=False)
        finally:
            (target / name).unlink(missing_ok=True)
    cores = _node_cores(identity)
    figures.pop("details")
    # The reply's wake-up is timed with the calls (their probe and echo are up then) and kept
    # with the scheduler's figures, where the simulation reads it.
    if "reply_wake_s" in figures:
        reply_wake = figures.pop("reply_wake_s")
        if figures.get("scheduler") is not None:
            figures["scheduler"] = dataclasses.replace(figures["scheduler"], reply_wake_s=reply_wake)
    profile = HardwareProfile(
        identity=identity, cores_per_node=max(1, cores), nodes=max(1, len(identity["nodes"])),
        disk=disk, disk_reference=reference, **figures,
        load_average=(load_start,) if load_start is not None else (),
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    save_profile(profile, cache, atomic_write_text)
    if out:
        save_profile(profile, out, atomic_write_text)
    return profile, Path(out) if out else cache, False
