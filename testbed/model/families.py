"""The analytic model families, each as a scaling curve over worker counts 1..n_max.

A family turns ``StepTerms`` (see terms.py for the symbols) into per-step phase times
for every worker count at once, so one call gives both the prediction at the config's
N and the curve that the knee is read from.

- initial: ideal I/O, a server that never queues: step = r + c + t + s_push + s_pull / k.
- updated: the server's throughput is capped at 1 / D: step = max(ideal step, N D).
- queueing: a closed network solved by exact MVA (async), or the barrier step
  Z_sync + N D (sync), with optional disk and shared-CPU centres.
- simulated: a discrete-event simulation of the protocol; it needs the whole config, so
  ``predict`` builds it (testbed/model/simfamily.py) and ``scaling_curve`` does not.

Shaped network links (``terms.links``, docs/model.md "Network links") add to the push and the
pull in every family: M / B + L alone; in updated a shard's inbound link caps its throughput
beside D; in queueing each shard's two links are processor-sharing centres (async) or shared
by the round's N transfers (sync). Unshaped links are zero terms and change nothing.

Pure: numpy and the standard library.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Optional

import numpy as np

from testbed.model.jitter import expected_max_factor
from testbed.model.knee import asymptotic_knee
from testbed.model.mva import Centre, CentreKind, solve_mva
from testbed.model.network import link_centres
from testbed.model.terms import StepTerms

__all__ = ["ModelFamily", "Bound", "ScalingCurve", "scaling_curve"]


class ModelFamily(str, enum.Enum):
    INITIAL = "initial"    # the reference study's first model: linear scaling
    UPDATED = "updated"    # the study's corrected model: sequential init, saturating server
    QUEUEING = "queueing"  # this project's: closed queueing network, exact MVA
    SIMULATED = "simulated"  # this project's: discrete-event simulation of the protocol (simfamily.py)


class Bound(str, enum.Enum):
    """The resource that limits a config. The train phase is bound by its most utilised
    shared centre when one is saturated (utilisation >= SATURATED), else by the largest
    share of its step; the init phase by the disk; the job by whichever phase is longer."""
    DISK = "disk"
    SERVER = "server"
    NETWORK = "network"
    COMPUTE = "compute"


SATURATED = 0.9


@dataclasses.dataclass(frozen=True)
class ScalingCurve:
    """Per-step times for worker counts 1..n_max (index i is i + 1 workers).

    The phase arrays are the mean of one event of that phase, as the measured summary
    reports them (a pull happens every k steps, so step_s counts pull_s / k). The
    ``share`` arrays split step_s over the resources; ``utilization`` holds the busy
    fraction of each shared centre the family models.
    """
    step_s: np.ndarray
    read_s: np.ndarray
    compute_s: np.ndarray
    push_s: np.ndarray
    pull_s: np.ndarray
    queue_s: np.ndarray
    apply_s: np.ndarray
    share: dict[Bound, np.ndarray]
    utilization: dict[Bound, np.ndarray]
    knee_asymptotic: Optional[float]

    @property
    def throughput_per_s(self) -> np.ndarray:
        """X(n) = n / step_s(n): steps per second over all workers."""
        return np.arange(1, self.step_s.size + 1) / self.step_s


def _ideal_step(t: StepTerms) -> float:
    return t.read_s + t.compute_s + t.worker_extra_s + t.transfer_s + t.server_demand_s + t.links.per_step_s


def _initial(t: StepTerms, n: np.ndarray) -> ScalingCurve:
    step = np.full(n.size, _ideal_step(t))
    const = lambda v: np.full(n.size, float(v))  # noqa: E731 - a local shorthand
    links = t.links
    # The shaped links (the study's form): M / B + L more per push and per pull, on top of
    # the calibrated transfers (both 0 when unshaped).
    share = {Bound.DISK: const(t.read_s), Bound.COMPUTE: const(t.compute_s),
             Bound.NETWORK: const(t.transfer_s + links.per_step_s), Bound.SERVER: const(t.server_demand_s)}
    # The initial model believes nothing saturates, so it reports no utilisation.
    return ScalingCurve(step, const(t.read_s), const(t.compute_s),
                        const(t.push_event_transfer_s + t.push_service_s + links.push_s),
                        const(t.pull_transfer_s + t.pull_service_s + links.pull_s), const(0.0), const(t.apply_s),
                        share, {}, None)


def _updated(t: StepTerms, n: np.ndarray) -> ScalingCurve:
    base = _initial(t, n)
    d = t.server_demand_s
    # A shard's inbound link carries one slice of every push (its outbound link one of every
    # k-th step's pull, never more): a server-side resource beside the shard's CPU demand D.
    d_link = t.links.shard_inbound_per_step_s
    # All N x steps updates pass through each shard, one at a time, and through its link: a
    # step can't be shorter than N times the busier of the two. The excess over the ideal
    # step is waiting: at the lock (queue) or, when the link is the busier, at the link.
    step = np.maximum(base.step_s, n * max(d, d_link))
    excess = step - base.step_s
    share = dict(base.share)
    utilization = {Bound.SERVER: n * d / step}
    queue = excess
    if d_link > d:
        queue = np.zeros(n.size)
        share[Bound.NETWORK] = base.share[Bound.NETWORK] + excess
    share[Bound.SERVER] = d + queue
    if d_link > 0:
        utilization[Bound.NETWORK] = n * d_link / step
    return dataclasses.replace(base, step_s=step, queue_s=queue, push_s=base.push_s + excess, share=share,
                               utilization=utilization, knee_asymptotic=asymptotic_knee(_ideal_step(t), max(d, d_link)))


def _queueing_async(t: StepTerms, n: np.ndarray) -> ScalingCurve:
    d = t.server_demand_s
    links = t.links
    # Each shard's inbound and outbound links: processor-sharing centres beside its own.
    centres = [Centre("server", d)] + link_centres(links)
    if t.read_s > 0:
        centres.append(Centre("disk", t.read_s, CentreKind.LOAD_DEPENDENT, t.read_rate_multipliers))
    rpc_cpu = t.rpc_cpu_s
    own = t.transfer_s + t.worker_extra_s  # a worker's transfers and gradient production, alone
    alpha1 = 1.0
    if t.has_cpu_centre:
        # One step's CPU work runs in several processes at once (the worker's, and the shards'
        # after they have answered): alone, it can keep more than one core busy. When it
        # exceeds the lone worker's whole step (sleeping compute included), it runs that many
        # times in parallel, so alpha(j) = min(j p, K) and a lone step is what was calibrated.
        p = 1.0
        if not t.compute_on_cpu and rpc_cpu > own + t.compute_s > 0:
            p = min(float(t.cores), rpc_cpu / (own + t.compute_s))
        alpha1 = p
        centres.append(Centre("cpu", t.cpu_demand_s, CentreKind.LOAD_DEPENDENT,
                              tuple(min(j * p, float(t.cores)) for j in range(1, t.cores + 2))))
    # The calibrated transfer times (and gradient production) already contain the RPC CPU
    # work of the worker and the shards; with the CPU centre in, that part moves from the
    # delay to the centre, so N = 1 is unchanged.
    transfer_delay = max(0.0, t.transfer_s + t.worker_extra_s - rpc_cpu)
    # CPU beyond the transfers' time is background work (Ray's threads, the shard's share)
    # that runs while the worker computes: it comes out of the sleep, so N = 1 stays exact.
    background = max(0.0, rpc_cpu - t.transfer_s - t.worker_extra_s)
    think = transfer_delay + (0.0 if t.compute_on_cpu else max(0.0, t.compute_s - background))
    # The worker's own link carries all S slices (M / B) while the shards' ends go on: with
    # S > 1 it can outlast a shard's whole part of the call (its slice, the latency, its
    # service); the excess, and the latency, are delays nobody else lengthens.
    k = t.pull_every
    own_push = max(0.0, links.worker_bytes_s - links.shard_push_demand_s - links.latency_s - t.push_service_s)
    own_pull = max(0.0, links.worker_bytes_s - links.shard_pull_demand_s - links.latency_s - t.pull_service_s)
    think += links.latency_s * (1.0 + 1.0 / k) + own_push + own_pull / k
    res = solve_mva(centres, think, int(n[-1]))
    x = res.throughput_per_s[1:]
    step = n / x
    zeros = np.zeros(n.size)
    r_server = res.response_s["server"][1:]
    r_disk = res.response_s["disk"][1:] if "disk" in res.response_s else zeros
    r_cpu = res.response_s["cpu"][1:] if "cpu" in res.response_s else zeros
    # A push's link time: its share of the shard's inbound link, the latency, the worker's own
    # link beyond the shard's part; a pull's likewise at the outbound link (R_out is per step).
    r_in = res.response_s["link_in"][1:] if "link_in" in res.response_s else zeros
    r_out = res.response_s["link_out"][1:] if "link_out" in res.response_s else zeros
    link_push = r_in + links.latency_s + own_push
    link_pull = r_out * k + links.latency_s + own_pull
    cpu_demand = t.cpu_demand_s or 1.0
    r_compute = r_cpu * (t.compute_s / cpu_demand) if t.compute_on_cpu else np.full(n.size, t.compute_s)
    # Stretch factor of a worker's transfers once its RPC work waits for a core. Only the CPU
    # that runs inside the transfers stretches them; the background part runs during the
    # compute, so alone (N = 1) the transfers take what was calibrated.
    r_rpc = r_cpu * alpha1 * min(rpc_cpu, own) / cpu_demand
    stretch = (transfer_delay + r_rpc) / own if own > 0 else np.ones(n.size)
    visits = 1.0 + 1.0 / t.pull_every  # pushes and pulls per step at a shard
    wait = np.maximum(0.0, (r_server - d) / visits)
    # No lockstep burst: an earlier version took, without jitter, the longer of MVA and a step
    # in which all N pushes reach a shard at once. Held-out draws showed it right for the wrong
    # reasons: it "helped" only spin configs that miss by 30-45% for their CPU contention, and
    # where lockstep was the only effect (sleep compute, an emulated apply under the lock) it
    # over-predicted train by 14-78% against MVA's 2-22% (paper_cntk): after the first step the
    # workers settle into a staggered order, as the simulated family shows (docs/model.md).
    share = {Bound.DISK: r_disk, Bound.COMPUTE: r_compute,
             Bound.NETWORK: t.transfer_s * stretch + link_push + link_pull / k, Bound.SERVER: r_server}
    utilization = {Bound.SERVER: res.utilization("server")[1:]}
    if links.shaped and ("link_in" in res.response_s or "link_out" in res.response_s):
        utilization[Bound.NETWORK] = np.maximum(*(res.utilization(c)[1:] if c in res.response_s else zeros
                                                  for c in ("link_in", "link_out")))
    if "disk" in res.response_s:
        utilization[Bound.DISK] = res.utilization("disk")[1:]
    if "cpu" in res.response_s:
        utilization[Bound.COMPUTE] = res.utilization("cpu")[1:]
    cycle_one = think + sum(c.demand_s / float(c.alphas(1)[0]) for c in centres)
    bottleneck = max(c.saturation_demand_s for c in centres)
    return ScalingCurve(step, r_disk if t.read_s > 0 else zeros, r_compute,
                        t.push_event_transfer_s * stretch + wait + t.push_service_s + link_push,
                        t.pull_transfer_s * stretch + wait + t.pull_service_s + link_pull,
                        wait, np.full(n.size, t.apply_s), share, utilization,
                        asymptotic_knee(cycle_one, bottleneck))


def _queueing_sync(t: StepTerms, n: np.ndarray) -> ScalingCurve:
    d = t.server_demand_s
    slowest = expected_max_factor(t.jitter_distribution, t.jitter_cv, n)
    multipliers = np.asarray(t.read_rate_multipliers)
    alphas = multipliers[np.minimum(n.astype(int), multipliers.size) - 1]
    read = t.read_s * n / alphas  # all N read at once and share the aggregate bandwidth B(N)
    rpc_cpu = t.rpc_cpu_s
    transfer_delay = max(0.0, t.transfer_s + t.worker_extra_s - rpc_cpu)
    # Everything runs at once between barriers: N workers' CPU work shares the cores.
    crowd = np.maximum(1.0, n / t.cores) if t.has_cpu_centre else np.ones(n.size)
    if t.compute_on_cpu:
        # N workers' CPU work time-shares K cores: the phase lasts as long as the slowest
        # worker's own work or the total work over the cores, whichever is longer.
        alone = t.compute_s * slowest + rpc_cpu
        cpu_wall = np.maximum(alone, n * t.cpu_demand_s / t.cores)
        compute_wall = cpu_wall * (t.compute_s * slowest / alone) if t.compute_s > 0 else np.zeros(n.size)
        rpc_wall = cpu_wall - compute_wall
    else:
        compute_wall = t.compute_s * slowest
        rpc_wall = rpc_cpu * crowd
    server = n * d  # every shard applies all N pushes and serves N / k pulls per step
    # The N pushes of a step reach a shard's inbound link at once and share it: all are through
    # after N (M/S) / B, then the latency; the N pulls of the round leave through its outbound
    # link likewise (sync pulls every step). The worker's own link (M / B, all S slices) runs
    # alongside the shard's part and counts only where it outlasts it (S > N).
    links = t.links
    wait_push = (n - 1) / 2.0 * t.push_service_s  # mean position in the burst of N pushes
    wait_pull = (n - 1) / 2.0 * t.pull_service_s
    shared_push = n * links.shard_push_demand_s + links.latency_s
    shared_pull = n * links.shard_pull_demand_s + links.latency_s
    link_push = shared_push + np.maximum(0.0, links.worker_bytes_s - shared_push - wait_push - t.push_service_s)
    link_pull = shared_pull + np.maximum(0.0, links.worker_bytes_s - shared_pull - wait_pull - t.pull_service_s)
    step = read + compute_wall + transfer_delay + rpc_wall + server + link_push + link_pull
    own = t.transfer_s + t.worker_extra_s
    inside = min(rpc_cpu, own) / rpc_cpu if rpc_cpu > 0 else 0.0  # as in _queueing_async
    stretch = (transfer_delay + rpc_wall * inside) / own if own > 0 else np.ones(n.size)
    share = {Bound.DISK: read, Bound.COMPUTE: compute_wall,
             Bound.NETWORK: t.transfer_s * stretch + link_push + link_pull, Bound.SERVER: server}
    utilization = {Bound.SERVER: server / step}
    if links.shard_push_demand_s > 0:
        # Busy fraction of a shard's inbound link: N slices a step (its outbound carries as many).
        utilization[Bound.NETWORK] = n * links.shard_push_demand_s / step
    if t.has_cpu_centre:
        utilization[Bound.COMPUTE] = n * t.cpu_demand_s / (t.cores * step)
    # The parts that grow with n have a slope per worker; X(n) tends to 1 / slope, and the
    # line through X(1) meets that cap at step(1) / slope, the sync analogue of (Z + D) / D.
    crowd_cpu = t.cpu_demand_s / t.cores if t.has_cpu_centre else 0.0
    slope = d + t.read_s / float(multipliers.max()) + crowd_cpu + links.shard_push_demand_s \
        + links.shard_pull_demand_s
    return ScalingCurve(step, read, t.compute_s * (crowd if t.compute_on_cpu else np.ones(n.size)),
                        t.push_event_transfer_s * stretch + wait_push + t.push_service_s + link_push,
                        t.pull_transfer_s * stretch + wait_pull + t.pull_service_s + link_pull,
                        wait_push, np.full(n.size, t.apply_s), share, utilization,
                        asymptotic_knee(float(step[0]), slope))


def scaling_curve(family: ModelFamily, terms: StepTerms, n_max: int) -> ScalingCurve:
    """The family's curve for 1..n_max workers (n_max >= 1)."""
    if n_max < 1:
        raise ValueError(f"n_max must be >= 1, got {n_max}")
    n = np.arange(1, n_max + 1, dtype=float)
    family = ModelFamily(family)
    if family is ModelFamily.SIMULATED:
        # Its curve is simulated from the config (seed, mode, staleness, faults), not the terms alone.
        raise ValueError("the simulated family has no curve from terms alone; use predict(config, profile, family)")
    if family is ModelFamily.INITIAL:
        return _initial(terms, n)
    if family is ModelFamily.UPDATED:
        return _updated(terms, n)
    return _queueing_sync(terms, n) if terms.sync else _queueing_async(terms, n)
