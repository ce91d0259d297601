"""The simulated family's glue: a config's ``StepTerms`` into a ``SimSpec``, simulations into
a ``Prediction`` (every phase, the bound, the utilisation, the knee).

How the terms are split (docs/model.md, "Family 4"):

- a transfer ``t_push`` / ``t_pull`` is the worker's calibrated RPC CPU (``worker_cpu_s``,
  shared over the push and the pulls of a step in proportion to their time) on a core, and
  the rest as a delay (latency, bytes on the wire); CPU beyond the transfers runs during
  compute (``background_s``);
- a shard's service ``s_push = o + a``: the dispatch o on a core outside the lock, the apply a
  under the lock, its CPU part on a core and its emulated part (``apply_seconds / S``) slept;
  a pull's copy ``s_pull - o`` under the lock on a core; what the shards' calibrated CPU
  (``server_cpu_s``) holds beyond those runs with the worker's background CPU (one burst per
  step, on a core, not waited for).
- shaped links: a slice's bytes over the bandwidth is its work at a shard's link, the whole
  gradient's at the worker's own, the latency a delay at the shard's end (``simactors.py``).

Cost: a prediction simulates the config's N once (at most ``POINT_WORKER_STEPS`` worker-steps;
longer runs are simulated shorter and scaled) and, for the knee, a coarse grid of worker counts
up to the search limit (``CURVE_POINTS`` geometric points of at most ``CURVE_WORKER_STEPS``
worker-steps each and ``CURVE_BUDGET`` in all, cached per config apart from its worker count,
so a sweep over workers simulates its grid once; once the rate has stopped growing, the larger
counts are taken as flat instead of simulated; where the budget runs out the search stops, and
``knee_search_max`` says how far it got); the rate between grid points is interpolated linearly.

Pure: SimPy, numpy and the standard library.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Optional

import numpy as np

from testbed.model.curves import INLINE_LIMIT_BYTES
from testbed.model.families import Bound, ModelFamily
from testbed.model.knee import marginal_knee
from testbed.model.profile import HardwareProfile, interpolate_setup_s
from testbed.model.simactors import SimSpec
from testbed.model.simulation import SimResult, simulate, simulate_init
from testbed.model.stragglers import stragglers
from testbed.model.terms import (
    StepTerms,
    emulated_apply_s,
    init_driver_call_s,
    init_gate_s,
    init_read_bytes,
    init_reply_wake_s,
    read_calls,
    steps_per_worker,
)

__all__ = ["sim_spec", "simulated_prediction", "simulated_rates", "POINT_WORKER_STEPS", "CURVE_WORKER_STEPS",
           "CURVE_BUDGET", "CURVE_POINTS"]

POINT_WORKER_STEPS = 10_000   # workers x steps simulated for the config itself
CURVE_WORKER_STEPS = 3_000    # ... for each point of the knee's grid
CURVE_BUDGET = 24_000         # ... for the whole grid: the knee search stops where it runs out
CURVE_POINTS = 18
CURVE_STEPS = 60              # most steps a grid point simulates (fewer when its budget says so)
PLATEAU = 1.02               # a rate gaining less than this factor over two grid points has saturated
MIN_STEPS = 12                # fewest steps a simulation runs (the warm-up is a quarter of them)


def _value(choice: Any) -> str:
    return str(getattr(choice, "value", choice))


def _faults(config: Any, kind: str) -> list[Any]:
    return [f for f in getattr(config, "faults", ()) if getattr(f, "kind", None) == kind]


def sim_spec(config: Any, profile: HardwareProfile, t: StepTerms, *, steps: Optional[int] = None,
             service: str = "deterministic") -> SimSpec:
    """The ``SimSpec`` of ``config`` for ``steps`` steps (default: the config's). Fault steps
    and updates are scaled by steps / the config's steps, so a shortened run keeps their place."""
    full = int(config.steps)
    steps = full if steps is None else steps
    scale = steps / full
    k, s = t.pull_every, t.servers
    worker_cpu = t.worker_cpu_s or 0.0
    per_step = t.transfer_s
    cpu_share = min(1.0, worker_cpu / per_step) if per_step > 0 else 0.0
    overhead = max(0.0, t.push_service_s - t.apply_s)
    apply_sleep = min(t.apply_s, emulated_apply_s(config, profile))
    apply_cpu = t.apply_s - apply_sleep
    # A pull's copy under the lock. The scalar terms' s_pull is a call of its own: dispatch plus
    # copy. Calibrated curves measure a due pull as it runs: under async and sync it travels
    # with the push (one call, no dispatch of its own), so s_pull is the copy alone there.
    curves, ssp = bool(profile.call_costs), _value(config.sync) == "ssp"
    combined = curves and not ssp
    # A pull of its own (every ssp pull) to one shard, under calibrated curves: the curve's pull
    # CPU is the copy (measured travelling with a push), and the call's own dispatch is a bare
    # call's, as it carries no argument; not the push's dispatch, which takes the slice. The
    # rule before (the push's dispatch, the copy inside it) made the pull's own call add
    # max(0, o - copy): 0.98 ms at 4 KiB and none at 8 MiB, where one ssp worker's pulls
    # measured 0.48 and 0.13 ms over the async one's. At 2 shards and more the calibrated step
    # per shard (``plain_pull_step_s``) is measured against the rule before and stays with it
    # (docs/model.md, "A pull of its own: a bare call's dispatch, at one shard").
    bare = profile.actor_call_cpu_s if curves and ssp and s == 1 and profile.actor_call_cpu_s else None
    copy = max(0.0, t.pull_service_s - (0.0 if combined or bare is not None else overhead))
    # A sync pull sharing its round's snapshot pays the copy less the memory copy of the slice
    # (the shard returns one snapshot to every call, each in its own reply).
    copy_rate = profile.server_copy_bytes_per_s or profile.server_apply_bytes_per_s
    reply = max(0.0, copy - (config.gradient_bytes / s) / copy_rate) if copy_rate else copy
    # A shard's CPU for its part of one push and of one pull (a pull of its own is dispatched too).
    push_shard_cpu = overhead + apply_cpu
    pull_shard_cpu = copy if combined else (bare if bare is not None else overhead) + copy
    services_cpu = s * push_shard_cpu + s * pull_shard_cpu / k
    # More shards than cores: the simulation shares the cores among the S shards' services of
    # one call (each stretched to S / cores of itself), and so would add that contention to a
    # lone worker's push and pull a second time, since the calibrated events measured there
    # (small_calls_by_shards, large_calls_by_shards) already hold it. Taken out of the worker's
    # side, so that one worker simulates at the calibrated figures (docs/model.md, "An eleventh").
    stretch = max(0.0, s / t.cores - 1.0) if t.cores > 0 else 0.0
    push_transfer = max(0.0, t.push_transfer_s - stretch * push_shard_cpu)
    # A pull of its own to 2 shards and more: the worker's figure is the pull travelling with a
    # push plus the calibrated step a shard beyond the first adds (``plain_pull_step_s``, the
    # 2-shard ssp pull against the travelling one), so the shards' dispatch of the call is in
    # it already. The simulation serves the push's dispatch at each shard (the copy inside it),
    # which adds max(0, o - s_pull) beyond the calibrated pull where the pull's service is less
    # than the dispatch (the small slices): that comes out of the worker's side, and one worker
    # simulates calibration's own run (docs/model.md, "A pull of its own at 2 shards and more:
    # the dispatch counted once").
    own_step = t.plain_pull_step
    twice = max(0.0, overhead - t.pull_service_s) if own_step else 0.0
    pull_transfer = max(0.0, t.pull_transfer_s - stretch * pull_shard_cpu - twice)
    # A call that finds the shard serving another: its dispatch's fixed part at the ratio of a
    # bare call's callee CPU queued to paused (docs/model.md, "A busy shard's dispatch").
    busy_ratio = (min(1.0, profile.actor_call_cpu_busy_s / profile.actor_call_cpu_s)
                  if profile.actor_call_cpu_busy_s and profile.actor_call_cpu_s else 1.0)
    overhead_busy = overhead - (1.0 - busy_ratio) * min(overhead, t.dispatch_fixed_s)
    restart = interpolate_setup_s(t.setup_points, 1) if t.setup_points else (t.setup_per_actor_s or 0.0)
    # What a call is held at the shards alone (one worker, no emulated apply's sleep): the
    # calibrated calls hold the caller's wake-up for that long a hold (``SimSpec.reply_wake``).
    spread = 1.0 + stretch
    push_alone = spread * (overhead + apply_cpu)
    # Ray's CPU per step beyond that of the smallest calibrated gradient is the object store's
    # work for the slices (calibrated with one push and one pull a step): half of it at each
    # transfer, while the call goes on; the rest stays in the background (docs/model.md, "The
    # object store's work during the transfers").
    stored = config.gradient_bytes / s >= INLINE_LIMIT_BYTES  # slices inline in the call: no object
    store = max(0.0, t.ray_cpu_s - _ray_cpu_base(profile)) / 2 if stored else 0.0
    return SimSpec(
        workers=t.workers, servers=s, steps=steps, pull_every=k, mode=_value(config.sync),
        staleness=int(getattr(config, "staleness", 0)), compute_s=t.compute_s,
        compute_mode=_value(config.compute.mode), jitter_distribution=t.jitter_distribution,
        jitter_cv=t.jitter_cv, read_s=t.read_s, read_multipliers=t.read_rate_multipliers,
        fill_s=t.worker_extra_s,
        push_cpu_s=cpu_share * push_transfer, push_wire_s=(1 - cpu_share) * push_transfer,
        pull_cpu_s=cpu_share * pull_transfer, pull_wire_s=(1 - cpu_share) * pull_transfer,
        push_return_cpu_s=cpu_share * t.push_return_s, push_return_wire_s=(1 - cpu_share) * t.push_return_s,
        overhead_s=overhead, apply_cpu_s=apply_cpu, apply_sleep_s=apply_sleep, copy_s=copy,
        # What the worker's and the shards' processes spend beyond the bursts above, and Ray's own
        # processes' work for the step: it runs meanwhile, nobody waits for it, it takes the cores.
        background_s=max(0.0, worker_cpu - per_step) + max(0.0, t.server_cpu_s - services_cpu) + t.ray_cpu_s - 2 * store,
        store_s=store,
        clock_cpu_s=profile.actor_call_cpu_s or 0.0, clock_cpu_busy_s=profile.actor_call_cpu_busy_s or 0.0,
        tick_cpu_s=profile.actor_caller_cpu_s or 0.0,
        gil=True, reply_outside=True, gil_handoff="random",
        cores=t.cores, call_s=profile.actor_call_latency_s, restart_s=float(restart or 0.0), seed=int(config.seed),
        stragglers=tuple((w, f, min(steps - 1, round(k0 * scale))) for w, f, k0 in stragglers(config)),
        kill_steps=tuple((int(f.worker), max(1, round(f.step * scale))) for f in _faults(config, "kill_worker")),
        kill_updates=tuple((int(f.shard), max(1, round(f.update * scale))) for f in _faults(config, "kill_server")),
        service=service,
        # The shaped links (zero when unshaped): a slice at a shard's link, the whole gradient at
        # the worker's own, and the latency at the shard's end.
        link_slice_s=t.links.shard_push_demand_s, link_worker_s=t.links.worker_bytes_s,
        link_latency_s=t.links.latency_s,
        spin_overshoot=profile.scheduler.spin_overshoot_s if profile.scheduler else (),
        wake=profile.scheduler.wake_s if profile.scheduler else (),
        # Every read call waits ``wake_s``: the first call's own curve (``wake_first_s``, recorded
        # since calibration version 25) was held out on 2026120422-23 and left out (docs/model.md,
        # "A step read's calls, woken one by one").
        read_ops=read_calls(config), read_wake_s=t.read_wake_s,
        reply_s=reply, overhead_busy_s=overhead_busy,
        reply_wake=profile.scheduler.reply_wake_s if profile.scheduler else (),
        push_alone_s=push_alone, push_pull_alone_s=push_alone + spread * copy,
        pull_alone_s=spread * ((bare if bare is not None else overhead) + copy),
        # A pull of its own at 2 shards and more pays the shard's whole dispatch even when it finds
        # the shard serving another: the busy discount (a bare call's queued CPU over its paused)
        # left the pulls of many ssp workers on 3-4 shards 43-61 % short (docs/model.md, "A plain
        # pull to a busy shard at 2 shards and more").
        pull_dispatch_s=bare if bare is not None else (overhead if own_step else None),
        pull_dispatch_busy_s=(min(bare, profile.actor_call_cpu_busy_s) if bare is not None
                              and profile.actor_call_cpu_busy_s else (overhead if own_step else None)),
    )


def _ray_cpu_base(profile: HardwareProfile) -> float:
    """Ray's own CPU per worker step at the smallest calibrated gradient (inline slices: no
    object in the store); 0 where not calibrated."""
    curve = profile.ray_cpu_per_step_s
    return curve.points[0][1] if curve is not None else 0.0


def _simulated_steps(workers: int, steps: int, budget: int) -> int:
    return min(steps, max(MIN_STEPS, budget // workers))


def _grid(n_max: int) -> np.ndarray:
    return np.unique(np.concatenate([np.arange(1, min(n_max, 4) + 1),
                                     np.geomspace(1, n_max, CURVE_POINTS).round()]).astype(int))


@functools.lru_cache(maxsize=64)
def _curve(base: SimSpec, n_max: int) -> tuple[np.ndarray, np.ndarray]:
    """Grid worker counts and the steady rate at each (steps per second over all workers),
    without faults (a curve is the steady state, as every family's). The grid ends early when
    the next point would take the simulated worker-steps past ``CURVE_BUDGET``."""
    counts: list[int] = []
    rates: list[float] = []
    spent = 0
    for n in _grid(n_max):
        n = int(n)
        if len(rates) >= 3 and n > 4 and max(rates[-2:]) < PLATEAU * rates[-3]:
            # Saturated: two grid points in a row gained under 2 %; the rest of the grid (the
            # costliest part, the largest counts) is taken as flat.
            counts.append(n)
            rates.append(rates[-1])
            continue
        steps = _simulated_steps(n, base.steps, CURVE_WORKER_STEPS)
        if counts and spent + n * steps > CURVE_BUDGET:
            break
        spent += n * steps
        counts.append(n)
        rates.append(simulate(dataclasses.replace(base, workers=n, steps=steps)).steady_rate_per_s)
    return np.asarray(counts), np.asarray(rates)


def simulated_rates(config: Any, profile: HardwareProfile, t: StepTerms, n_max: int) -> np.ndarray:
    """X(n) for n = 1.. the grid's last count (n_max, or less when the budget ran out first):
    simulated on the grid, linear in between."""
    # A steady-state rate does not depend on the run's length: simulate up to CURVE_STEPS steps
    # whatever the config's, so strong-scaling configs (whose steps change with N) share a grid.
    base = dataclasses.replace(sim_spec(config, profile, t), workers=0, steps=CURVE_STEPS, stragglers=(),
                               kill_steps=(), kill_updates=())
    grid, rates = _curve(base, n_max)
    return np.interp(np.arange(1, int(grid[-1]) + 1), grid, rates)


def _init_s(config: Any, profile: HardwareProfile, workers: int) -> float:
    """The simulated init phase with ``workers`` workers (the disk's curve from the profile, as
    ``terms.init_seconds`` reads it)."""
    call = init_driver_call_s(config, profile, workers)  # the driver's call
    if config.workload.dataset_bytes <= 0 or profile.disk is None:
        return call
    disk = profile.disk
    single = disk.single_stream_bytes_per_s
    top = max(disk.seq_read_bytes_per_s.values()) / single
    phase = simulate_init(workers, init_read_bytes(config, workers) / single,
                          lambda j: disk.aggregate_bandwidth(j) / single, top,
                          _value(config.data.init_io) == "sequential", call, lambda k: init_gate_s(profile, k),
                          disk.read_start_s)
    return phase + init_reply_wake_s(profile, call, phase)  # the driver's wake-up, as terms.init_seconds


def _shares(result: SimResult, steps: int) -> tuple[dict, dict]:
    """The train phase's share per resource (seconds over the run) and each simulated centre's
    utilisation: the shards' locks, the cores (always simulated: every apply and copy is CPU
    work), the disk when there are step reads."""
    share = {Bound.DISK: result.share_s["disk"], Bound.COMPUTE: result.share_s["compute"],
             Bound.NETWORK: result.share_s["network"], Bound.SERVER: result.share_s["server"]}
    utilization = {Bound.SERVER: result.server_utilization, Bound.COMPUTE: result.cpu_utilization}
    if result.disk_utilization is not None:
        utilization[Bound.DISK] = result.disk_utilization
    if result.network_utilization is not None:
        utilization[Bound.NETWORK] = result.network_utilization
    return {b: steps * v for b, v in share.items()}, utilization


def simulated_prediction(config: Any, profile: HardwareProfile, t: StepTerms, n_max: int) -> dict[str, Any]:
    """The fields of the simulated family's ``Prediction`` for ``config`` (knee searched up to
    ``n_max``), with ``share`` and ``utilization`` in place of ``bound``: ``prediction.predict``
    builds the record and picks the bound the same way for every family (so this module does not
    import that one, which imports it)."""

    big_n = t.workers
    steps = int(config.steps)
    ran = _simulated_steps(big_n, steps, POINT_WORKER_STEPS)
    result = simulate(sim_spec(config, profile, t, steps=ran))
    train = result.train_s * steps / ran
    init = _init_s(config, profile, big_n)
    setup = t.setup_s(big_n)
    # The knee: the steady rate on the grid, the whole job's rate from it.
    rates = simulated_rates(config, profile, t, n_max)
    n_max = rates.size  # how far the simulated grid reached
    n = np.arange(1, n_max + 1)
    grid = _grid(n_max)
    inits = np.interp(n, grid, [_init_s(config, profile, int(k)) for k in grid])
    steps_frac = np.array([steps_per_worker(config, int(k)) for k in n])
    setups = np.array([t.setup_s(int(k)) for k in n])
    job_rate = n * steps_frac / (setups + inits + steps_frac * n / rates)
    top = float(rates.max())
    saturates = rates[-1] < 0.9 * n_max * rates[0]
    share, utilization = _shares(result, steps)
    phases = result.phases
    modelled_setup = t.setup_per_actor_s is not None or bool(t.setup_points)
    return dict(
        config_id=str(getattr(config, "config_id", "")), model=ModelFamily.SIMULATED, workers=big_n,
        servers=t.servers, steps=steps, setup_s=setup, setup_modelled=modelled_setup, init_s=init, train_s=train,
        total_s=setup + init + train, step_s=train / steps, steps_per_s=big_n * steps / train,
        read_s=phases["read"], compute_s=phases["compute"], push_s=phases["push"], pull_s=phases["pull"],
        queue_s=phases["queue"], apply_s=phases["apply"], server_utilization=result.server_utilization,
        share=share, utilization=utilization, knee_workers=marginal_knee(job_rate),
        knee_train_workers=marginal_knee(rates),
        knee_asymptotic=max(1.0, top / float(rates[0])) if saturates else None,
        knee_search_max=n_max,
    )
