"""Which worker process hosts which workers: virtual workers, grouped per node.

A worker process (one Ray actor) may host several workers, each with its own seeded state,
step loop, events and calls (``actors.host``). What one step of a worker costs in CPU is
mostly Ray's per-call work plus waking a sleeping process; a process that hosts k workers
wakes for all of them, so a node emulates far more workers than it has processes to spare.

Pure: the plan depends only on where the workers landed and how many cores each node has.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

__all__ = ["PROCESSES_PER_CORE", "workers_per_process", "group_workers", "requested_workers_per_process",
           "process_count", "processes_on_node", "workers_by_node"]

# Worker processes per core when the spec leaves the choice to the testbed. One process runs
# Python on at most one core at a time (the GIL), so a node needs at least one per core to
# use its cores for the workers' calls; two per core leaves the scheduler room while a
# process waits, and keeps the processes (and their start-up, ~0.5 s each) few.
PROCESSES_PER_CORE = 2


def workers_per_process(workers_on_node: int, cores: float, requested: Optional[int] = None) -> int:
    """How many workers each process of a node hosts: ``requested`` (the spec's
    ``workers_per_process``), or enough that the node runs ``PROCESSES_PER_CORE`` x its cores
    processes (at least one, never more processes than workers)."""
    if workers_on_node < 1:
        raise ValueError(f"a node with workers needs at least one, got {workers_on_node}")
    if requested is not None:
        if requested < 1:
            raise ValueError(f"workers_per_process must be >= 1, got {requested}")
        return min(requested, workers_on_node)
    processes = max(1, min(workers_on_node, math.floor(PROCESSES_PER_CORE * max(cores, 1.0))))
    return math.ceil(workers_on_node / processes)


def requested_workers_per_process(compute_mode: str, requested: Optional[int]) -> Optional[int]:
    """Workers a process hosts as a config asks: the spec's ``workers_per_process``; else, for
    compute that busies a core (``spin``, ``matmul``), one per process, since virtual workers
    are threads of one Python process and a spinning thread holds its interpreter lock,
    stalling its siblings' calls (the first held-out draw: spin configs' pushes up to 5x the
    prediction); else (``sleep``) None: chosen per node by ``group_workers``."""
    if requested is not None:
        return requested
    return None if compute_mode == "sleep" else 1


def workers_by_node(workers: int, nodes: int) -> list[int]:
    """``workers`` spread evenly over ``nodes`` nodes (never more nodes than workers), the most
    first (the model's view of a placement)."""
    nodes = max(1, min(nodes, workers))
    return [workers // nodes + (1 if i < workers % nodes else 0) for i in range(nodes)]


def processes_on_node(workers_on_node: int, cores: float, requested: Optional[int]) -> int:
    """How many worker processes ``group_workers`` makes for a node's ``workers_on_node``."""
    return math.ceil(workers_on_node / workers_per_process(workers_on_node, cores, requested))


def process_count(workers: int, nodes: int, cores_per_node: float, requested: Optional[int]) -> int:
    """How many worker processes ``group_workers`` makes for ``workers`` spread evenly over
    ``nodes`` nodes of ``cores_per_node`` cores (the model's view of a placement)."""
    return sum(processes_on_node(n, cores_per_node, requested) for n in workers_by_node(workers, nodes) if n > 0)


def group_workers(worker_nodes: Sequence[str], cores_by_node: dict[str, float],
                  requested: Optional[int] = None) -> list[list[int]]:
    """The workers each process hosts: worker i runs on ``worker_nodes[i]``; a process hosts
    workers of one node only, in index order, ``workers_per_process`` of them (the last of a
    node's processes may host fewer; with the automatic choice they differ by at most one)."""
    by_node: dict[str, list[int]] = {}
    for index, node in enumerate(worker_nodes):
        by_node.setdefault(node, []).append(index)
    groups = []
    for node, indices in by_node.items():
        per = workers_per_process(len(indices), cores_by_node.get(node, 1.0), requested)
        if requested is None:  # balanced: sizes differ by at most one
            count = math.ceil(len(indices) / per)
            edges = [(len(indices) * k) // count for k in range(count + 1)]
            groups += [indices[edges[k]:edges[k + 1]] for k in range(count)]
        else:
            groups += [indices[k:k + per] for k in range(0, len(indices), per)]
    return groups
