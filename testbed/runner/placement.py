"""Placement: which node each server shard and worker runs on, reserved with a Ray placement group.

Design. Every config reserves one placement group and removes it when the config
ends. A *bundle* is a slot on one node; each actor is started in a given bundle
(bundle indexing), and several actors may share a bundle. Bundles ask only for a
small fraction of a CPU per actor (``cpu_per_actor``, 0.01 at most, less when many
actors must share a small node): a bundle must reserve *some* resource, and the
emulated compute is mostly sleep, so thousands of workers still fit on two cores.
Fractional CPU is chosen over a custom resource because every node has CPUs, while
a custom resource would have to be declared on each ``ray start``.

The plan, by ``placement.strategy`` and ``placement.servers_own_node``:

=================  ======================================  ==========================================
strategy           servers_own_node: false                 servers_own_node: true
=================  ======================================  ==========================================
``pack``           one bundle per actor, PACK              STRICT_SPREAD of [servers], [all workers]
``spread``         one bundle per actor, SPREAD            STRICT_SPREAD of [servers], then the workers
                                                           dealt over min(N, nodes - 1) bundles
``strict_spread``  STRICT_SPREAD, one bundle per worker;   STRICT_SPREAD of [servers], then one bundle
                   shard j joins worker j mod N's bundle   per worker (needs N + 1 nodes)
=================  ======================================  ==========================================

With ``servers_own_node`` bundle 0 holds every shard and STRICT_SPREAD keeps every
worker bundle off its node; that needs no custom resource and no second group.
``plan_placement`` is pure (tests call it without Ray); ``reserve`` talks to Ray.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import uuid
from typing import Any, Iterator

from testbed.config.errors import UserError
from testbed.config.spec import Placement, PlacementStrategy

__all__ = ["PlacementPlan", "Reservation", "plan_placement", "cpu_per_actor", "reserve", "MAX_CPU_PER_ACTOR"]

MAX_CPU_PER_ACTOR = 0.01
_CPU_QUANTUM = 10_000  # Ray counts resources in units of 1e-4; plans are integral in those units
_PG_READY_TIMEOUT_S = 60.0


@dataclasses.dataclass(frozen=True)
class PlacementPlan:
    """Bundles to reserve and the bundle each actor starts in."""
    strategy: str                        # Ray's name: PACK, SPREAD or STRICT_SPREAD
    bundles: tuple[dict[str, float], ...]
    server_bundle: tuple[int, ...]       # bundle index of server shard j
    worker_bundle: tuple[int, ...]       # bundle index of worker i
    cpu_per_actor: float

    def __post_init__(self) -> None:
        used = set(self.server_bundle) | set(self.worker_bundle)
        if used != set(range(len(self.bundles))):
            raise ValueError(f"every bundle must hold an actor: bundles {len(self.bundles)}, used {sorted(used)}")


def cpu_per_actor(actors: int, smallest_node_cpus: float) -> float:
    """The CPU share each actor reserves: 0.01, or less so that all actors fit in half the smallest node."""
    units = math.floor(smallest_node_cpus * _CPU_QUANTUM / 2 / max(1, actors))
    return max(1, min(int(MAX_CPU_PER_ACTOR * _CPU_QUANTUM), units)) / _CPU_QUANTUM


def plan_placement(placement: Placement, servers: int, workers: int, nodes: int,
                   smallest_node_cpus: float = 1.0) -> PlacementPlan:
    """Assign S shards and N workers to bundles; raise ``UserError`` when the cluster's ``nodes`` cannot hold them."""
    strategy = PlacementStrategy(placement.strategy)
    f_units = round(cpu_per_actor(servers + workers, smallest_node_cpus) * _CPU_QUANTUM)
    if placement.servers_own_node:
        if strategy is PlacementStrategy.PACK:
            groups = 1
        elif strategy is PlacementStrategy.SPREAD:
            groups = max(1, min(workers, nodes - 1))
        else:
            groups = workers
        _need_nodes(groups + 1, nodes, placement)
        server_bundle = (0,) * servers
        worker_bundle = tuple(1 + i % groups for i in range(workers))
        ray_strategy = "STRICT_SPREAD"
    elif strategy is PlacementStrategy.STRICT_SPREAD:
        _need_nodes(workers, nodes, placement)
        worker_bundle = tuple(range(workers))
        server_bundle = tuple(j % workers for j in range(servers))
        ray_strategy = "STRICT_SPREAD"
    else:
        server_bundle = tuple(range(servers))
        worker_bundle = tuple(servers + i for i in range(workers))
        ray_strategy = strategy.value.upper()
    count = max(server_bundle + worker_bundle) + 1
    per_bundle = [0] * count
    for b in server_bundle + worker_bundle:
        per_bundle[b] += 1
    bundles = tuple({"CPU": n * f_units / _CPU_QUANTUM} for n in per_bundle)
    return PlacementPlan(ray_strategy, bundles, server_bundle, worker_bundle, f_units / _CPU_QUANTUM)


def _need_nodes(needed: int, nodes: int, placement: Placement) -> None:
    if needed > nodes:
        own = " with servers_own_node" if placement.servers_own_node else ""
        raise UserError(
            f"placement.strategy {PlacementStrategy(placement.strategy).value}{own} needs {needed} nodes with CPUs, "
            f"the cluster has {nodes}; add nodes, lower workers, or use placement.strategy spread")


@dataclasses.dataclass
class Reservation:
    """A ready placement group and the node each bundle landed on."""
    plan: PlacementPlan
    group: Any
    bundle_nodes: dict[int, str]

    def _options(self, bundle: int) -> dict[str, Any]:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        # Tasks an actor starts stay out of the group: the bundle is sized for the actor alone.
        strategy = PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=bundle,
                                                    placement_group_capture_child_tasks=False)
        return {"num_cpus": self.plan.cpu_per_actor, "scheduling_strategy": strategy}

    def server_options(self, shard: int) -> dict[str, Any]:
        return self._options(self.plan.server_bundle[shard])

    def worker_options(self, index: int) -> dict[str, Any]:
        return self._options(self.plan.worker_bundle[index])

    def server_node(self, shard: int) -> str:
        """The node shard ``shard``'s bundle was placed on."""
        return self.bundle_nodes[self.plan.server_bundle[shard]]

    def worker_node(self, index: int) -> str:
        """The node worker ``index``'s bundle was placed on."""
        return self.bundle_nodes[self.plan.worker_bundle[index]]

    def worker_nodes(self) -> list[str]:
        """The distinct nodes that workers will land on, in worker order."""
        return list(dict.fromkeys(self.bundle_nodes[b] for b in self.plan.worker_bundle))


@contextlib.contextmanager
def reserve(plan: PlacementPlan, *, timeout_s: float = _PG_READY_TIMEOUT_S) -> Iterator[Reservation]:
    """Create the placement group, wait until it is placed, yield it, and always remove it."""
    import ray
    from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

    group = placement_group(list(plan.bundles), strategy=plan.strategy, name=f"ddnn-{uuid.uuid4().hex[:8]}")
    try:
        try:
            ray.get(group.ready(), timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise UserError(
                f"the cluster could not place {len(plan.bundles)} bundles ({plan.strategy}) within {timeout_s:.0f} s; "
                f"are its nodes busy, or fewer than the placement needs?") from None
        table = placement_group_table(group)
        yield Reservation(plan, group, {int(k): v for k, v in table["bundles_to_node_id"].items()})
    finally:
        remove_placement_group(group)
