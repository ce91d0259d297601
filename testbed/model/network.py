"""The model's terms for shaped network links (docs/network.md), for the families to use.

Symbols as in docs/model.md: ``M`` = gradient_bytes, ``S`` shards, ``k`` = pull_every, and
for the link ``B`` its bandwidth in bytes a second and ``L`` its latency.

- A worker's push: its M bytes leave over its own link (the S slices share it), so it
  takes ``M / B + L``; likewise a pull brings M bytes in: ``M / B + L``.
- A shard's inbound link carries one slice of every worker's push, ``(M/S) / B`` each: that
  is a shared resource with demand ``(M/S) / B`` per push, a processor-sharing centre in the
  queueing family (for MVA it has the same solution as a first-come-first-served queue). Its
  outbound link carries the pulls, ``(M/S) / B`` each, one every k steps.
- With N workers each stepping every ``T`` seconds, the shard's inbound link is busy
  ``N (M/S) / B / T`` of the time; it saturates at ``N* = T S B / M`` workers.

Unshaped figures (bandwidth None, latency 0) give zero terms: the calibrated transfer
terms already hold what Ray's own movement of the bytes costs, and the shaped time comes on
top of it (the emulation waits out the link after Ray has moved the bytes).

Pure: the standard library and the model's MVA centre type; the config is read by attribute.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

from testbed.model.mva import Centre

__all__ = ["LinkTerms", "link_terms", "link_terms_for", "transfer_s", "link_centres", "link_saturation_workers"]


def transfer_s(nbytes: float, bandwidth_bytes_per_s: Optional[float], latency_s: float = 0.0) -> float:
    """One transfer alone on a link: ``L + nbytes / B`` (no bandwidth term when unshaped)."""
    if nbytes < 0 or latency_s < 0:
        raise ValueError(f"nbytes and latency must be >= 0, got {nbytes}, {latency_s}")
    if bandwidth_bytes_per_s is None:
        return latency_s
    if not bandwidth_bytes_per_s > 0:
        raise ValueError(f"bandwidth must be > 0 or None, got {bandwidth_bytes_per_s}")
    return latency_s + nbytes / bandwidth_bytes_per_s


@dataclasses.dataclass(frozen=True)
class LinkTerms:
    """The links' part of one worker step. Times in seconds; demands per visit at one shard."""
    push_s: float             # M / B + L: a worker's push over its own link
    pull_s: float             # M / B + L: a pull into the worker
    shard_push_demand_s: float  # (M/S) / B: one push at a shard's inbound link
    shard_pull_demand_s: float  # (M/S) / B: one pull at a shard's outbound link
    latency_s: float
    pull_every: int

    @property
    def per_step_s(self) -> float:
        """What the links add to a lone worker's step: a push every step, a pull every k."""
        return self.push_s + self.pull_s / self.pull_every

    @property
    def shard_inbound_per_step_s(self) -> float:
        """Demand a worker's step puts on one shard's inbound link (one push a step)."""
        return self.shard_push_demand_s

    @property
    def shard_outbound_per_step_s(self) -> float:
        """Demand a worker's step puts on one shard's outbound link (one pull every k steps)."""
        return self.shard_pull_demand_s / self.pull_every

    @property
    def shaped(self) -> bool:
        return self.per_step_s > 0

    @property
    def worker_bytes_s(self) -> float:
        """M / B: a worker's own link carrying its whole gradient (or the parameters), no latency."""
        return self.push_s - self.latency_s


def link_terms(gradient_bytes: float, servers: int, pull_every: int, bandwidth_bytes_per_s: Optional[float],
               latency_s: float = 0.0) -> LinkTerms:
    """The link terms for a gradient of ``gradient_bytes`` over ``servers`` shards."""
    if servers < 1 or pull_every < 1:
        raise ValueError(f"servers and pull_every must be >= 1, got {servers}, {pull_every}")
    whole = transfer_s(gradient_bytes, bandwidth_bytes_per_s, latency_s)
    slice_s = transfer_s(gradient_bytes / servers, bandwidth_bytes_per_s, 0.0)
    return LinkTerms(push_s=whole, pull_s=whole, shard_push_demand_s=slice_s, shard_pull_demand_s=slice_s,
                     latency_s=latency_s, pull_every=pull_every)


def link_terms_for(config: Any, *, same_node: bool = False) -> LinkTerms:
    """The link terms of a run config: its ``network`` figures between nodes, or its
    ``network.same_node`` figures for a worker on its shard's node."""
    shape = config.network.same_node if same_node else config.network
    bandwidth = None if shape.bandwidth is None else shape.bandwidth / 8.0  # the spec states bits a second
    return link_terms(config.gradient_bytes, config.servers, config.pull_every, bandwidth, shape.latency)


def link_centres(terms: LinkTerms) -> list[Centre]:
    """One shard's inbound and outbound links as queueing centres, demands per worker step
    (none when unshaped), for the queueing family to add beside the shard's own centre."""
    centres = []
    if terms.shard_inbound_per_step_s > 0:
        centres.append(Centre("link_in", terms.shard_inbound_per_step_s))
    if terms.shard_outbound_per_step_s > 0:
        centres.append(Centre("link_out", terms.shard_outbound_per_step_s))
    return centres


def link_saturation_workers(step_s: float, terms: LinkTerms) -> float:
    """Workers at which a shard's busier link is busy all the time, each worker stepping every
    ``step_s`` seconds: ``step_s / demand`` (inf when the links are unshaped)."""
    demand = max(terms.shard_inbound_per_step_s, terms.shard_outbound_per_step_s)
    if not step_s > 0:
        raise ValueError(f"step_s must be > 0, got {step_s}")
    return math.inf if demand == 0 else step_s / demand
