"""Per-node services of a run: the cluster's nodes, data preparation on them, and the node monitors.

``testbed.runner.run`` wires the training actors; the services here are per node rather
than per actor, so they are pinned with ``NodeAffinitySchedulingStrategy`` and
reserve no CPU (they must not compete with the placement group's bundles).

Terms: a *node* is a Ray node, named by its hex node id; ``alive_nodes`` lists the
ones with CPUs, which are the ones placement can use.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Iterable, Optional, TypeVar

from actors.monitor import MonitorActor
from testbed.records.events import DEFAULT_INTERVAL_S, RESOURCE_SCHEMA

__all__ = ["NodeInfo", "alive_nodes", "prepare_on_nodes", "NodeMonitors", "estimate_offset"]

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class NodeInfo:
    node: str
    ip: str
    cpus: float


def alive_nodes() -> list[NodeInfo]:
    """The cluster's live nodes, in Ray's order, with their CPU counts."""
    import ray
    return [NodeInfo(n["NodeID"], n["NodeManagerAddress"], float(n["Resources"].get("CPU", 0.0)))
            for n in ray.nodes() if n.get("Alive")]


def _pinned(node: str) -> dict[str, Any]:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    return {"num_cpus": 0, "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node, soft=False)}


def prepare_on_nodes(prepare: Callable[[str], T], nodes: Iterable[str], *, shared: bool) -> dict[str, T]:
    """Run ``prepare(node_id)`` once on each node in ``nodes`` (local disks), or once in all when
    ``shared`` (a file system every node mounts: generated once, on the first node); returns
    each call's result by the node it ran on.

    The preparation callable is an argument so the data-set writer plugs in unchanged, e.g.
    ``lambda node: prepare_dataset(cfg.data, cfg.workload.dataset_bytes, node)``; it is shipped
    to the nodes by Ray's pickling, so it must be picklable.
    """
    import ray

    nodes = list(dict.fromkeys(nodes))
    if not nodes:
        return {}
    targets = nodes[:1] if shared else nodes
    task = ray.remote(_call_with_node)
    results = ray.get([task.options(**_pinned(n)).remote(prepare, n) for n in targets])
    return dict(zip(targets, results))


def _call_with_node(prepare: Callable[[str], T], node: str) -> T:
    return prepare(node)


def estimate_offset(remote_clock: Callable[[], int], local_ns: Callable[[], int] = time.time_ns,
                    tries: int = 5) -> tuple[int, int]:
    """(offset_ns, rtt_ns): the remote wall clock minus the local one at the midpoint of the
    round trip, from the try with the shortest round trip (Cristian's algorithm). The true
    offset lies within rtt_ns / 2 of the estimate."""
    best: Optional[tuple[int, int]] = None
    for _ in range(tries):
        t0 = local_ns()
        remote = remote_clock()
        t1 = local_ns()
        rtt = t1 - t0
        if best is None or rtt < best[1]:
            best = (remote - (t0 + t1) // 2, rtt)
    return best


class NodeMonitors:
    """One ``MonitorActor`` per node for the whole run; ``start``/``stop`` bracket each config."""

    def __init__(self, nodes: Iterable[str], interval_s: float = DEFAULT_INTERVAL_S) -> None:
        import ray
        cls = ray.remote(MonitorActor)
        self.actors = {n: cls.options(**_pinned(n)).remote(interval_s) for n in nodes}
        ray.get([a.clock.remote() for a in self.actors.values()])  # wait until every monitor is up

    def clock_offsets(self) -> dict[str, dict[str, int]]:
        """Per node, its wall clock's offset against the driver's (see ``estimate_offset``)."""
        import ray
        out = {}
        for node, actor in self.actors.items():
            offset, rtt = estimate_offset(lambda: ray.get(actor.clock.remote()))
            out[node] = {"offset_ns": int(offset), "rtt_ns": int(rtt)}
        return out

    def start(self, config_id: str, repeat: int) -> None:
        import ray
        ray.get([a.start.remote(config_id, repeat) for a in self.actors.values()])

    def stop(self) -> dict[str, list]:
        """Every node's samples since ``start``, merged into one set of columns."""
        import ray
        parts = ray.get([a.stop.remote() for a in self.actors.values()])
        return {name: [v for part in parts for v in part[name]] for name, _ in RESOURCE_SCHEMA}

    def close(self) -> None:
        import ray
        for actor in self.actors.values():
            ray.kill(actor)
        self.actors = {}

    def __enter__(self) -> "NodeMonitors":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
