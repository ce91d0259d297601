"""The model's inputs: one config and one hardware profile, reduced to per-step terms.

Every family (initial, updated, queueing) builds on the same terms, so the families
differ only in how they combine them. Symbols follow docs/model.md:

- ``N`` workers, ``S`` server shards, ``k`` = pull_every, ``M`` = gradient_bytes.
- ``c`` compute per step; ``r`` one step's input read alone on the disk.
- ``t_push`` = L + M / W and ``t_pull`` = L + M / W: a worker's side of a push and of a
  pull (L the actor-call latency, W the transfer bandwidth). The S slices of a push go
  out concurrently, so their latencies overlap but all M bytes leave the one worker.
- ``s_push`` = o + (M/S) / A: a shard's service per push (o the per-call overhead, A the
  in-place update bandwidth); ``a`` = (M/S) / A, the ``apply`` event alone.
- ``s_pull`` = o + (M/S) / C: a shard's service per pull (C its copy bandwidth).
- ``D`` = s_push + s_pull / k: a shard's demand per worker step.

When the profile has per-call cost curves (``profile.call_costs``, docs/model.md), every
per-call figure is read on its curve at the config's gradient size (a shard's at its slice
M / S): a worker's push and pull as measured alone, each shard's CPU per push and per pull
(its service), the apply, each process's CPU and the untimed rest of a step. Profiles
without curves (schema 1) use the scalar figures above. ``extrapolated(config, profile)``
names every figure read outside its calibrated range.

Pure: the standard library (the config is read by attribute, so the pydantic spec module
is not imported here).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

from testbed.config.errors import UserError
from testbed.emulation.hosting import (
    process_count,
    processes_on_node,
    requested_workers_per_process,
    workers_by_node,
    workers_per_process,
)
from testbed.model.curves import CALL_COST_CURVES, INLINE_LIMIT_BYTES, PLAIN_PULL_STEP, CallCosts, at_side
from testbed.model.network import LinkTerms, link_terms, link_terms_for
from testbed.model.profile import DiskProfile, HardwareProfile, interpolate_setup_s
from testbed.model.scheduler import load_curve_at

__all__ = [
    "StepTerms", "step_terms", "init_read_bytes", "init_call_s", "init_hosted_s", "init_driver_call_s", "init_gate_s",
    "init_seconds",
    "worker_processes", "steps_per_worker", "extrapolated",
    "transfer_seconds", "INLINE_BYTES", "node_count", "read_calls", "plain_push_fraction", "emulated_apply_s",
]


def _value(choice: Any) -> str:
    """The string of a spec enum (they are str enums) or of a plain string."""
    return str(getattr(choice, "value", choice))


def node_count(profile: HardwareProfile) -> int:
    """Nodes of the profiled cluster: ``profile.nodes``, else the length of identity['nodes'], else 1."""
    nodes = profile.nodes
    if nodes is None:
        listed = profile.identity.get("nodes")
        nodes = len(listed) if isinstance(listed, (list, tuple)) else (listed if isinstance(listed, int) else 1)
    return max(1, int(nodes))


def _need_disk(profile: HardwareProfile, why: str) -> DiskProfile:
    if profile.disk is None:
        raise UserError(f"the profile has no disk figures, but {why}; run `testbed calibrate` with the data directory")
    return profile.disk


@dataclasses.dataclass(frozen=True)
class StepTerms:
    """Per-step inputs of every family, in seconds unless the name says otherwise."""
    workers: int
    servers: int
    pull_every: int
    sync: bool
    compute_s: float                    # c: mean compute per step (jitter has mean 1)
    # matmul is a fixed amount of work on a core, stretched when the cores are shared. sleep
    # takes no core; spin busy-waits until a wall-clock deadline, so sharing never stretches
    # it: for the analytic families both are delays (spin's hold on a core, which slows the
    # others' CPU work, is left to the simulated family).
    compute_on_cpu: bool
    jitter_distribution: str
    jitter_cv: float
    read_s: float                       # r: one step's input read, alone on the disk
    read_rate_multipliers: tuple[float, ...]  # B(j) / B(1) for j = 1, 2, ... concurrent readers
    push_transfer_s: float              # t_push
    pull_transfer_s: float              # t_pull
    push_service_s: float               # s_push
    apply_s: float                      # a
    pull_service_s: float               # s_pull
    worker_cpu_s: Optional[float]       # calibrated RPC CPU per step; None: the CPU centre is left out
    cores: int                          # cores shared by the workers (all nodes)
    setup_per_actor_s: Optional[float]  # None: setup is not modelled
    worker_extra_s: float = 0.0          # untimed worker work per step: producing the gradient
    # Of ``read_s``, what the pause before the read adds (the device waking: each reader's own
    # wait, not the disk's work; ``StepReadCosts.step_read_wake_s``); 0 without paused-read curves.
    read_wake_s: float = 0.0
    server_cpu_s: float = 0.0            # CPU all shards spend per worker step (calibrated; 0: unknown)
    setup_points: tuple[tuple[int, float], ...] = ()  # measured (actors, seconds) start-up curve
    ray_cpu_s: float = 0.0               # CPU of Ray's own processes per worker step (raylet, GCS)
    # The shaped links' part (docs/network.md), on top of the calibrated transfers above:
    # zero terms when the network is unshaped.
    links: LinkTerms = link_terms(0.0, 1, 1, None)
    # A plain push (a call of its own, its pull not due) lasts ``push_return_s`` longer than the
    # push part of a push that carries the pull (t_push): its answer's way back. The fraction of
    # a worker's pushes that are plain: 1 - 1/k under ``async``, all under ``ssp``, none under ``sync``.
    push_return_s: float = 0.0
    plain_push_fraction: float = 0.0
    # The fixed part of a shard's dispatch of a push (its CPU beyond the apply at the smallest
    # calibrated slice; 0: unknown). The simulated family discounts it for a call that finds
    # the shard serving another (docs/model.md, "A busy shard's dispatch").
    dispatch_fixed_s: float = 0.0
    # An ssp pull to 2 shards and more under calibrated curves: a call of its own whose worker
    # figure adds the calibrated step per shard beyond the first (``plain_pull_step_s``), the
    # shards' dispatch inside it. Set where that step is added (``_curve_terms``); the simulated
    # family reads it to count the dispatch once and to serve it whole at a busy shard.
    plain_pull_step: bool = False

    @property
    def server_demand_s(self) -> float:
        """D: one shard's service per worker step (a push every step, a pull every k)."""
        return self.push_service_s + self.pull_service_s / self.pull_every

    @property
    def push_event_transfer_s(self) -> float:
        """A worker's side of its mean push event: t_push, and the answer of the plain ones."""
        return self.push_transfer_s + self.plain_push_fraction * self.push_return_s

    @property
    def transfer_s(self) -> float:
        """A worker's own transfer time per step: its pushes' (t_push, plain ones answered) + t_pull / k."""
        return self.push_event_transfer_s + self.pull_transfer_s / self.pull_every

    @property
    def rpc_cpu_s(self) -> float:
        """CPU a step costs besides compute: the worker's RPC work and gradient production,
        and the shards' work for it (0 without the CPU centre)."""
        if not self.has_cpu_centre:
            return 0.0
        return (self.worker_cpu_s or 0.0) + self.worker_extra_s + self.server_cpu_s + self.ray_cpu_s

    @property
    def cpu_demand_s(self) -> float:
        """Demand at the shared-CPU centre per step: RPC work plus CPU-bound compute."""
        return self.rpc_cpu_s + (self.compute_s if self.compute_on_cpu else 0.0)

    @property
    def has_cpu_centre(self) -> bool:
        return self.worker_cpu_s is not None or (self.compute_on_cpu and self.compute_s > 0)

    def setup_s(self, workers: int) -> float:
        """Starting the config's N + S actors: on the measured start-up curve when there is one,
        else ``cores`` at a time, each taking setup_per_actor_s (0 when not modelled)."""
        actors = workers + self.servers
        if self.setup_points:
            return interpolate_setup_s(self.setup_points, actors)
        if self.setup_per_actor_s is None:
            return 0.0
        return self.setup_per_actor_s * math.ceil(actors / self.cores)


def steps_per_worker(config: Any, workers: float) -> float:
    """Steps one worker runs with ``workers`` workers, without rounding up (for smooth curves).

    Weak scaling: workload.steps. Strong scaling: epochs * dataset_bytes / (minibatch *
    sample_bytes) / workers. ``config.steps`` gives the rounded-up count the run uses.
    """
    w = config.workload
    if w.steps is not None:
        return float(w.steps)
    return w.epochs * w.dataset_bytes / w.sample_bytes / w.minibatch / workers


def _read_terms(config: Any, profile: HardwareProfile, pause_s: float = 0.0) -> tuple[float, tuple[float, ...]]:
    """r (one step's input read, alone on the disk) and the disk's rate multipliers B(j) / B(1).

    With paused-read curves (``profile.step_reads``): the calibrated mean of a step's read
    after ``pause_s``, the rest of the step (a worker reads after its compute, push and pull,
    and a read after a pause costs more than one in a tight loop; reads.py). Without them
    (older profiles): the bytes at the single-stream bandwidth, or the I/Os at the random IOPS."""
    mode = _value(config.data.step_reads)
    if mode == "none" or config.workload.dataset_bytes <= 0:
        return 0.0, (1.0,)
    disk = _need_disk(profile, f"data.step_reads is {mode!r}") if profile.step_reads is None else profile.disk
    sample, minibatch = config.workload.sample_bytes, config.workload.minibatch

    def alphas(random: bool = mode == "random") -> tuple[float, ...]:
        """The disk's rate by concurrent readers, random or sequential (one reader's without figures)."""
        if disk is None:
            return (1.0,)
        if random:
            return disk.random_rate_multipliers()
        single = disk.single_stream_bytes_per_s
        return tuple(disk.aggregate_bandwidth(j) / single for j in range(1, max(disk.seq_read_bytes_per_s) + 1))
    if profile.step_reads is not None:
        return profile.step_reads.step_read_s(mode, sample, minibatch, pause_s), alphas()
    if mode == "random" and disk.rand_read_iops:
        # The largest measured block not above a sample; a sample is read in whole blocks.
        sizes = sorted(disk.rand_read_iops)
        block = max([b for b in sizes if b <= sample], default=sizes[0])
        return minibatch * math.ceil(sample / block) / disk.rand_read_iops[block], alphas()
    # No random figures: the bytes at the single-stream bandwidth, shared as sequential reads are.
    return minibatch * sample / disk.single_stream_bytes_per_s, alphas(random=False)


def _read_wake_s(config: Any, profile: HardwareProfile, pause_s: float, read_s: float) -> float:
    """The part of a step's read (``read_s``) that the pause before it adds: the read after
    ``pause_s`` less the same read back to back (``StepReadCosts.step_read_wake_s``).

    Why apart: the disk's rate by concurrent readers (``DiskProfile``) was measured back to
    back, and a device waking from a pause is a wait each reader pays side by side with the
    others, not work the disk does in turn. Served whole on the shared disk, the wake-up was
    multiplied by the readers: on the draws 2026120519-2026120600, 16-21 sleeping workers'
    8 random 4 KiB reads were simulated 1.8-6.1 ms against 1.1-3.0 measured (12-16 readers at
    once read in 2.8 ms, about 128 reads at the disk's 44 k IOPS with 8 readers), where about
    half of the lone read (0.4-0.5 of 0.8-1.0 ms) is the wake after the pause (docs/model.md,
    "A step read's wake-up is each reader's own")."""
    if read_s <= 0 or profile.step_reads is None:  # no step reads (mode "none" or no data set): read_s is 0
        return 0.0
    wake = profile.step_reads.step_read_wake_s(_value(config.data.step_reads), config.workload.sample_bytes,
                                               config.workload.minibatch, pause_s)
    return min(read_s, wake)


def read_calls(config: Any) -> int:
    """The blocking read calls of one step read (``testbed.data.diskio``): a random read is
    ``minibatch`` samples of whole blocks each, a sequential one the minibatch's bytes in blocks
    (0 without step reads)."""
    mode = _value(config.data.step_reads)
    if mode == "none" or config.workload.dataset_bytes <= 0:
        return 0
    sample, minibatch, block = config.workload.sample_bytes, config.workload.minibatch, config.data.block_bytes
    if mode == "random":
        return minibatch * math.ceil(sample / block)
    return max(1, math.ceil(minibatch * sample / block))


def _read_pause_s(compute_s: float, calls: dict[str, Any], pull_every: int) -> float:
    """What comes between two of a worker's step reads, alone: the rest of its step (compute,
    the untimed gradient work, the push and the pull every k steps)."""
    return (compute_s + calls["worker_extra_s"] + calls["push_transfer_s"] + calls["push_service_s"]
            + (calls["pull_transfer_s"] + calls["pull_service_s"]) / pull_every)


def _compute_s(config: Any, profile: HardwareProfile) -> float:
    if _value(config.compute.mode) == "matmul":
        if profile.flops_per_s <= 0:
            raise UserError("compute.mode is 'matmul' but the profile has no flops_per_s; run `testbed calibrate`")
        return config.compute.flops / profile.flops_per_s
    return float(config.compute.seconds)


def _transfer_bytes_per_s(config: Any, profile: HardwareProfile) -> float:
    """Remote bandwidth when the cluster has several nodes and the placement spreads actors."""
    spread = _value(config.placement.strategy) != "pack" or bool(config.placement.servers_own_node)
    if spread and node_count(profile) > 1 and profile.transfer_bytes_per_s_remote:
        return profile.transfer_bytes_per_s_remote
    return profile.transfer_bytes_per_s_local


# Ray passes arguments and results up to this size inline with the call; larger ones go
# through the object store, which costs ``object_store_call_s`` more per object.
INLINE_BYTES = 100 * 1024


def transfer_seconds(nbytes: float, servers: int, profile: HardwareProfile, bandwidth: float) -> float:
    """A worker's side of one push or pull of ``nbytes`` split over ``servers`` shards:
    one call latency (the S calls overlap), the object store's fixed cost for each slice
    too large to go inline, and the bytes at the transfer bandwidth."""
    store = profile.object_store_call_s
    slices = servers if nbytes / servers > INLINE_BYTES else 0
    return profile.actor_call_latency_s + slices * store + nbytes / bandwidth


def _per_step_cpu(profile: HardwareProfile, role: str, nbytes: float, actors: int) -> Optional[float]:
    """Schema 1's CPU per worker step of the ``role``'s processes: a fixed part per actor
    involved plus the gradient bytes at the calibrated rate; None when not calibrated."""
    line = profile.step_cpu
    fixed = None if line is None else (line.worker_per_step_s if role == "worker" else line.server_per_step_s)
    if fixed is None:
        return None
    rate = line.worker_bytes_per_s if role == "worker" else line.server_bytes_per_s
    return actors * fixed + (nbytes / rate if rate else 0.0)


def _worker_side(profile: HardwareProfile, costs: CallCosts, name: str, m: float, s: int) -> float:
    """A worker-side figure (its push, its pull, its CPU per call) at gradient size ``m`` with
    ``s`` shards. Up to the largest calibrated shard count: that count's curve. Beyond it, the
    worker makes one call more per shard, and each call costs its fixed part again, while the
    bytes (M in all) stay the same: the figure grows by a per-shard step read at the smallest
    calibrated size, where the fixed part is all of it (never shrinking). The step is measured
    where calibration ran a larger count at that size (``small_calls_by_shards``: 4 shards),
    linear up to it and along it beyond; without one, it is the step between the two largest
    calibrated counts.

    Why measured: the step from 1 to 2 shards (the rule before) is not the step from 2 to 4.
    Draw 2026120115 read pushes with 3 and 4 shards at 4-43 KiB 32-113 % long (six configs, the
    pulls 1-79 %), where 2 shards' curves read them within -24..+20 %: going from one call to
    two adds the fork-join, going further adds calls alone. And why read at the smallest size:
    the first held-out draw had 3 and 4 shards read at 2's curve, and the workers' CPU per step
    2-3 times the prediction; growing the whole figure along the step at every size instead
    read a 19.8 MB sync pull at 4 shards at 19.7 ms, where it measured 5.5 ms (draw
    2026120112): at large sizes the step between 1 and 2 shards is mostly the curves' noise."""
    # Each of the s slices (m / s bytes) goes inline or through the object store: read the
    # curve of c shards (its slices m / c) on that side of its own step (at c x the limit).
    above = m / s >= INLINE_LIMIT_BYTES

    def read(c: CallCosts, nbytes: float) -> float:
        return at_side(getattr(c, name), nbytes, c.shards * INLINE_LIMIT_BYTES, above)

    value = read(costs, m)
    calibrated = sorted(profile.call_costs, key=lambda c: c.shards)
    if not calibrated or s <= calibrated[-1].shards:
        return value
    hi = calibrated[-1]
    small = getattr(hi, name).lo_bytes
    # Inline slices are read on ``hi``'s curve where its calls carry slices of the same size
    # (hi.shards x m / s), not at m, where hi's slices can be past the limit and its curve
    # already climbs to the object store's cost; never below the smallest size calibrated.
    at = m if above else max(hi.shards * m / s, min(m, small))

    def measured_step(by_shards: dict[int, dict[str, float]], at_bytes: float) -> Optional[float]:
        """The step a shard more adds, from the figure calibration measured beyond ``hi`` at
        ``at_bytes`` (None where it measured none)."""
        beyond = sorted((k, f[name]) for k, f in by_shards.items() if k > hi.shards and name in f)
        if not beyond:
            return None
        k, at_k = beyond[0]
        return max(0.0, (at_k - getattr(hi, name).at(at_bytes)) / (k - hi.shards))

    slope = None
    if above and profile.large_calls_bytes > 0:
        # Slices through the object store: the step a shard more adds where they go that way
        # (each slice's put and get is a fixed cost again), measured at the large size; from
        # there on linear in bytes through the larger size's step (and along that line beyond
        # it: the step grows with the slice; never below 0), the large size's step below it.
        large = float(profile.large_calls_bytes)
        slope = measured_step(profile.large_calls_by_shards, large)
        larger = float(profile.larger_calls_bytes)
        if slope is not None and larger > large and m > large:
            far = measured_step(profile.larger_calls_by_shards, larger)
            if far is not None:
                slope = max(0.0, slope + (far - slope) * (m - large) / (larger - large))
    if slope is None:
        slope = measured_step(profile.small_calls_by_shards, small)
    if slope is None:
        if len(calibrated) < 2:
            return value
        lo = calibrated[-2]
        base = getattr(hi, name).at(small)
        slope = max(0.0, (base - getattr(lo, name).at(small)) / (hi.shards - lo.shards))
    return read(hi, at) + slope * (s - hi.shards)


# A measured shape beyond this many times the 2-shard step (or below its inverse) is a broken
# run, not a shape: the plain pull's step is the difference of two noisy means.
PLAIN_PULL_SHAPE_BOUNDS = (1 / 3, 3.0)


def plain_pull_shape(profile: HardwareProfile, s: int) -> float:
    """The step a pull of its own adds per shard beyond the first at ``s`` shards, over the
    2-shard step (``plain_pull_step_s``): 1 at 2 shards; where calibration measured the step at
    a larger count k (``small_calls_by_shards[k]``, at the smallest size), their ratio r there
    (bounded), linear in the shard count from 1 at 2 to r at k, and r beyond; 1 without it.
    The shape measured at the smallest size is read at every size: side by side the step per
    shard at 4 shards was about 0.7 x the 2-shard one at 4 KiB and 256 KiB (2026-12-07) and 0.75 x
    at 4 MiB (2026-12-04; docs/model.md, "The plain pull's step at 4 shards")."""
    step2 = profile.plain_pull_step_s
    if s <= 2 or step2 is None or not step2.points:
        return 1.0
    measured = sorted((k, f[PLAIN_PULL_STEP]) for k, f in profile.small_calls_by_shards.items()
                      if k > 2 and PLAIN_PULL_STEP in f)
    base = step2.points[0][1]  # the smallest slice: the smallest size at 2 shards
    if not measured or base <= 0:
        return 1.0
    k, at_k = measured[0]
    lo, hi = PLAIN_PULL_SHAPE_BOUNDS
    r = min(hi, max(lo, at_k / base))
    return 1.0 + (r - 1.0) * min(1.0, (s - 2) / (k - 2))


def _curve_terms(config: Any, profile: HardwareProfile, costs: CallCosts) -> dict[str, Any]:
    """The per-call terms read on the calibrated curves at the config's gradient size.

    The push and pull a worker sees alone are measured whole; a shard's service is its CPU
    per call (the apply and the copy are inside it, under its lock and its GIL), and the
    worker's own side of the call (t_push, t_pull) is the rest. Every process's CPU per
    step (worker, and each of the S shards) feeds the CPU centre; the step's untimed rest
    (producing and slicing the gradient) is the worker's extra work."""
    m, s, k = config.gradient_bytes, config.servers, config.pull_every
    part = m / s
    push, pull = _worker_side(profile, costs, "worker_push_s", m, s), _worker_side(profile, costs, "worker_pull_s", m, s)
    apply_cal = costs.apply_s.at(part)
    above = part >= INLINE_LIMIT_BYTES
    plain_step = _value(config.sync) == "ssp" and profile.plain_pull_step_s is not None and s > 1
    if plain_step:
        # Every ssp pull is a call of its own: every shard's reply is in it, where the curves'
        # pull (travelling with the push) holds the last shard's alone.
        pull += (s - 1) * at_side(profile.plain_pull_step_s, part, INLINE_LIMIT_BYTES, above) \
            * plain_pull_shape(profile, s)
    shard_push_cpu = at_side(costs.shard_push_cpu_s, part, INLINE_LIMIT_BYTES, above)
    shard_pull_cpu = at_side(costs.shard_pull_cpu_s, part, INLINE_LIMIT_BYTES, above)
    # A shard's service can't be shorter than its apply nor longer than the call it serves.
    s_push = min(push, max(apply_cal, shard_push_cpu))
    s_pull = min(pull, shard_pull_cpu)
    remote = _transfer_bytes_per_s(config, profile)
    # Across nodes the bytes travel at the remote bandwidth instead of the local one.
    extra_net = m / remote - m / profile.transfer_bytes_per_s_local if remote != profile.transfer_bytes_per_s_local \
        else 0.0
    gap = costs.step_gap_s.at(m)
    worker_cpu = (_worker_side(profile, costs, "worker_push_cpu_s", m, s)
                  + _worker_side(profile, costs, "worker_pull_cpu_s", m, s) / k)
    # The untimed rest of the step is the worker's own CPU work: counted once, as extra work.
    shards_cpu = s * (shard_push_cpu + shard_pull_cpu / k)
    emulated = emulated_apply_s(config, profile)
    # The fixed part of a shard's dispatch of an inline slice (the rest of a larger slice's
    # dispatch grows with its bytes). A slice through the object store has fixed costs of its
    # own (a put, a get), which no bare call measures: none is counted.
    dispatch_fixed = 0.0 if above else costs.dispatch_fixed_s()
    return dict(push_transfer_s=push - s_push + extra_net, pull_transfer_s=pull - s_pull + extra_net,
                push_service_s=s_push + emulated, apply_s=apply_cal + emulated, pull_service_s=s_pull,
                worker_cpu_s=max(0.0, worker_cpu - gap), worker_extra_s=gap, server_cpu_s=shards_cpu,
                dispatch_fixed_s=dispatch_fixed, plain_pull_step=plain_step)


def emulated_apply_s(config: Any, profile: HardwareProfile) -> float:
    """The emulated part of one shard's apply: ``apply_seconds / S`` slept under its lock, and
    the sleep ends late by the calibrated overshoot of a sleep at rest (0 without the figure;
    docs/model.md, "An emulated apply's sleep ends late")."""
    asked = float(getattr(config, "apply_seconds", 0.0)) / config.servers
    if asked <= 0:
        return 0.0
    late = profile.scheduler.sleep_overshoot_s if profile.scheduler is not None else 0.0
    return asked + late


def _scalar_terms(config: Any, profile: HardwareProfile) -> dict[str, Any]:
    """The per-call terms from schema 1's scalar figures (a profile without curves)."""
    m, s = config.gradient_bytes, config.servers
    bandwidth = _transfer_bytes_per_s(config, profile)
    transfer = transfer_seconds(m, s, profile, bandwidth)
    # The emulated part of an update (``apply_seconds``, slept under the shard's lock) is
    # split over the shards like the gradient.
    apply_s = (m / s) / profile.server_apply_bytes_per_s + emulated_apply_s(config, profile)
    fill_rate = profile.gradient_fill_bytes_per_s
    copy_rate = profile.server_copy_bytes_per_s or profile.server_apply_bytes_per_s
    return dict(push_transfer_s=transfer, pull_transfer_s=transfer,
                push_service_s=profile.server_call_overhead_s + apply_s, apply_s=apply_s,
                pull_service_s=profile.server_call_overhead_s + (m / s) / copy_rate,
                # A worker calls every shard to push and to pull: its fixed CPU per step grows with S.
                worker_cpu_s=_per_step_cpu(profile, "worker", m, s),
                worker_extra_s=m / fill_rate if fill_rate else 0.0,
                server_cpu_s=_per_step_cpu(profile, "server", m, s) or 0.0)


def _links(config: Any) -> LinkTerms:
    """The link terms between nodes for every worker/shard pair. A multi-node placement whose
    workers share a node with a shard (``network.same_node``) is approximated by these too
    (docs/model.md, "Network links")."""
    return link_terms_for(config)


def step_terms(config: Any, profile: HardwareProfile) -> StepTerms:
    """Reduce a run config (``RunConfig`` or ``ConfigFields``) and a profile to ``StepTerms``."""
    costs = profile.call_costs_for(config.servers)
    calls = _curve_terms(config, profile, costs) if costs is not None else _scalar_terms(config, profile)
    compute_s = _compute_s(config, profile)
    pause_s = _read_pause_s(compute_s, calls, config.pull_every)
    read_s, read_alphas = _read_terms(config, profile, pause_s)
    mode = _value(config.compute.mode)
    return StepTerms(
        workers=config.workers, servers=config.servers, pull_every=config.pull_every,
        sync=_value(config.sync) == "sync",
        compute_s=compute_s, compute_on_cpu=mode == "matmul",
        jitter_distribution=_value(config.compute.jitter.distribution), jitter_cv=float(config.compute.jitter.cv),
        read_s=read_s, read_rate_multipliers=read_alphas, read_wake_s=_read_wake_s(config, profile, pause_s, read_s),
        cores=profile.cores_per_node * node_count(profile),
        setup_per_actor_s=profile.actor_setup_s,
        setup_points=tuple(sorted(getattr(profile, "setup_s_by_actors", {}).items())),
        ray_cpu_s=ray_cpu_per_step(config, profile),
        links=_links(config),
        push_return_s=profile.push_return_s or 0.0, plain_push_fraction=plain_push_fraction(config),
        **calls,
    )


def ray_cpu_per_step(config: Any, profile: HardwareProfile) -> float:
    """CPU of Ray's own processes per worker step: the one-shard curve at the gradient size, and
    for each shard beyond the first the calibrated step at the slice (0 where not calibrated)."""
    if profile.ray_cpu_per_step_s is None:
        return 0.0
    value = profile.ray_cpu_per_step_s.at(config.gradient_bytes)
    s = config.servers
    if s > 1 and profile.ray_cpu_shard_step_s is not None:
        part = config.gradient_bytes / s
        value += (s - 1) * at_side(profile.ray_cpu_shard_step_s, part, INLINE_LIMIT_BYTES, part >= INLINE_LIMIT_BYTES)
    return value


def plain_push_fraction(config: Any) -> float:
    """The fraction of a worker's pushes that are calls of their own (``actors/worker.py``):
    under ``async`` the k - 1 pushes between pulls (the k-th carries the pull), under ``ssp``
    every push (the clock's tick comes between the push and the pull), under ``sync`` none."""
    mode = _value(config.sync)
    if mode == "ssp":
        return 1.0
    if mode == "async":
        return 1.0 - 1.0 / max(1, int(config.pull_every))
    return 0.0


def extrapolated(config: Any, profile: HardwareProfile) -> tuple[str, ...]:
    """The per-call figures a prediction of ``config`` reads outside their calibrated range,
    as ``"<figure> at <bytes> B (calibrated <lo>..<hi> B)"`` (a shard's figures at its slice),
    plus ``"shards"`` when the config has more shards than any calibrated count. Empty when
    every figure is interpolated, or when the profile has no curves (nothing to flag)."""
    costs = profile.call_costs_for(config.servers)
    if costs is None:
        return ()
    out = []
    for name in CALL_COST_CURVES:
        curve, at = getattr(costs, name), CallCosts.read_bytes(name, config.gradient_bytes, config.servers)
        if not curve.covers(at):
            out.append(f"{name} at {at:.0f} B (calibrated {curve.lo_bytes:.0f}..{curve.hi_bytes:.0f} B)")
    if config.servers > max(c.shards for c in profile.call_costs):
        beyond = sorted(profile.small_calls_by_shards)
        also = f"; the worker's calls at {', '.join(map(str, beyond))} at the smallest size" if beyond else ""
        out.append(f"shards: {config.servers} (calibrated {', '.join(str(c.shards) for c in profile.call_costs)}{also})")
    return tuple(out)


def init_read_bytes(config: Any, workers: float) -> float:
    """V: bytes one worker reads at init (D / N for partition 'shard', D for 'full')."""
    d = config.workload.dataset_bytes
    return d / workers if _value(config.data.partition) == "shard" else float(d)


def worker_processes(config: Any, profile: HardwareProfile, workers: int) -> int:
    """Worker processes the runner makes for ``workers`` workers (``testbed.emulation.hosting``),
    spread evenly over the profiled nodes."""
    requested = requested_workers_per_process(_value(config.compute.mode), config.workers_per_process)
    return process_count(workers, node_count(profile), profile.cores_per_node, requested)


def init_call_s(profile: HardwareProfile, processes: int = 1) -> float:
    """The driver's call that starts init and waits for its end, with nothing to read, to
    ``processes`` worker processes: at 1, as calibration measured it (the single-worker runs'
    init spans: the call reaches the worker host, which starts a thread per hosted worker; one
    actor-call latency in profiles without it); at more, on the calibrated fan-out curve
    (``init_fanout_s_by_actors``: the driver's call to k idle actors at once), read linearly
    from that one-process figure, and along the curve's last segment beyond it.

    Read directly, not as the one-process figure plus the curve's growth from its value at 1
    (the rule before): the curve starts at 2 and its segment from 2 to 8 extrapolated to 1 says
    1.8 ms where one process measures 1.0 ms, so the growth read from it was short by ~0.8 ms at
    every count (held-out draws 2026120113 and 2026120114: init with no data set 0.78-1.0 x the
    curve's own value at 2-5 processes, against 0.5-0.8 x by the rule before)."""
    one = profile.init_call_s if profile.init_call_s is not None else profile.actor_call_latency_s
    points = [(k, v) for k, v in sorted(profile.init_fanout_s_by_actors.items()) if k > 1]
    if processes <= 1 or not points:
        return one
    return max(one, interpolate_setup_s([(1, one), *points], processes))


def init_hosted_s(config: Any, profile: HardwareProfile, workers: int) -> float:
    """What hosting several workers in each worker process adds to the init call: the
    calibrated figure at the workers a process hosts (``init_hosted_s_by_workers``, 0 at one,
    which runs inline; linear between its counts, along its last segment beyond them), scaled by
    the node's processes against the count it was measured at (the hand-outs of all processes
    share the node's cores; never fewer than its cores). 0 in profiles without the figure, and
    wherever every process hosts one worker (``spin`` and ``matmul`` compute).

    Why: each hosted worker's ``init`` runs in a thread of its own that the host wakes and
    waits for; the held-out draws of 2026-12-05 (19:00-21:00) measured the inits with nothing
    to read of 8-32 sleeping workers (4 processes on 2 cores) 1.0-1.5 x their prediction,
    more with more workers a process (docs/model.md, "The init call to processes hosting
    several workers")."""
    points = sorted(profile.init_hosted_s_by_workers.items())
    if not points or workers <= 1:
        return 0.0
    on_node = workers_by_node(workers, node_count(profile))[0]  # the busiest node
    requested = requested_workers_per_process(_value(config.compute.mode), config.workers_per_process)
    per = workers_per_process(on_node, profile.cores_per_node, requested)
    if per <= 1:
        return 0.0
    processes = processes_on_node(on_node, profile.cores_per_node, requested)
    cores = max(1, int(profile.cores_per_node))
    scale = max(processes, cores) / max(profile.init_hosted_processes, cores)
    return max(0.0, float(interpolate_setup_s([(1, 0.0), *points], per))) * scale


def init_driver_call_s(config: Any, profile: HardwareProfile, workers: int) -> float:
    """The driver's call that starts init with ``workers`` workers, nothing read: to the worker
    processes the runner makes (``init_call_s``), each handing it to the workers it hosts
    (``init_hosted_s``)."""
    return init_call_s(profile, worker_processes(config, profile, workers)) + init_hosted_s(config, profile, workers)


def init_gate_s(profile: HardwareProfile, workers: int) -> float:
    """What a sequential init's I/O gate adds for ``workers`` workers taking its token in turn,
    beyond the driver's call: on the calibrated curve (``init_gate_s_by_workers``), linear
    between its counts and along its last segment beyond them; two actor-call latencies a
    worker in profiles without it (a call to take the token, one to hand it on)."""
    if workers <= 0:
        return 0.0
    if not profile.init_gate_s_by_workers:
        return 2 * workers * profile.actor_call_latency_s
    return float(interpolate_setup_s(list(profile.init_gate_s_by_workers.items()), workers))


def init_reply_wake_s(profile: HardwareProfile, call_s: float, phase_s: float) -> float:
    """What the driver's wake-up adds to an init phase of ``phase_s`` whose call alone takes
    ``call_s``: the driver blocks in its call while the workers read, and a reply to a caller
    held longer wakes it later (``SchedulerCosts.reply_wake_s``, the curve calibration measured
    on a bare call held 0-20 ms); the call's own hold is in ``call_s`` already, so the curve at
    the phase less the curve at the call. 0 in profiles without the curve.

    Why: the one-worker parallel inits of the held-out draws 2026120416-0508 spent 0.9-1.9 ms
    between the driver's call and the worker's read (median ~1.1) and 0.5-1.5 ms between the
    read's end and the call's (median ~1.0), 2.2 ms beside the read where the call alone with
    nothing to read took 1.2 (the calibrated 1.0-1.2)."""
    points = profile.scheduler.reply_wake_s if profile.scheduler is not None else ()
    if not points or phase_s <= call_s:
        return 0.0
    return max(0.0, load_curve_at(points, phase_s) - load_curve_at(points, call_s))


def init_seconds(config: Any, profile: HardwareProfile, workers: int, *, ideal: bool) -> float:
    """The init phase with ``workers`` workers.

    ideal (the initial family): every worker reads alone at single-stream bandwidth, so V / B(1).
    Otherwise: sequential init takes N V / B(1); parallel init takes N V / B(N), B(N) the
    aggregate bandwidth measured with N concurrent readers; each read also pays the first read's
    start after idle (``DiskProfile.read_start_s``): N of them in turn when sequential, one
    (side by side) when parallel; and the driver's wake-up after the reads held its call
    (``init_reply_wake_s``).
    """
    # The driver's call that starts the phase (and waits for its end) costs its calibrated
    # time even with nothing to read.
    call = 0.0 if ideal else init_driver_call_s(config, profile, workers)
    if config.workload.dataset_bytes <= 0:
        return call
    disk = _need_disk(profile, "the workload has a data set to read at init")
    v = init_read_bytes(config, workers)
    if ideal:
        return v / disk.single_stream_bytes_per_s
    if _value(config.data.init_io) == "sequential":
        # Each worker takes the gate's token, reads alone, and hands it on (init_gate_s).
        phase = call + init_gate_s(profile, workers) + workers * (disk.read_start_s + v / disk.single_stream_bytes_per_s)
    else:
        phase = call + disk.read_start_s + workers * v / disk.aggregate_bandwidth(workers)
    return phase + init_reply_wake_s(profile, call, phase)
