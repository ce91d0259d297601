"""Chrome trace export: the events of a run as a ``trace.json`` that Perfetto and chrome://tracing open.

Pure: a DataFrame of events (the columns of ``EVENT_SCHEMA``) in, a JSON-ready dict
out. One process per node (named by its IP and short id), one thread per actor
(named ``driver``, ``server-0``, ``worker-3``...), one complete event (``ph: "X"``)
per timed phase. Chrome traces count in microseconds; timestamps are relative to
the run's first event, whose wall-clock time is kept in ``otherData``. Configs run
one after another, so an actor name reused by a later config gets the same thread
and its events follow on the same line.
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = ["chrome_trace", "ROLE_ORDER"]

# Threads sorted driver first, then servers, workers, the rest: the order one reads a step in.
ROLE_ORDER = {"driver": 0, "server": 1, "worker": 2, "gate": 3, "monitor": 4}


def _actor_key(actor: str, role: str) -> tuple[int, str, int]:
    name, _, index = actor.rpartition("-")
    if index.isdigit():
        return ROLE_ORDER.get(role, 9), name, int(index)
    return ROLE_ORDER.get(role, 9), actor, -1


def chrome_trace(events, nodes: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """The trace of ``events``; ``nodes`` maps node id to IP, for the process names."""
    nodes = nodes or {}
    trace: list[dict[str, Any]] = []
    if len(events) == 0:
        return {"traceEvents": trace, "displayTimeUnit": "ms", "otherData": {"origin_ns": None}}
    origin_ns = int(events["start_ns"].min())
    node_ids = sorted(events["node"].unique(), key=lambda n: (nodes.get(n, ""), n))
    pids = {node: i + 1 for i, node in enumerate(node_ids)}
    for node, pid in pids.items():
        label = f"node {nodes[node]} {node[:8]}" if node in nodes else f"node {node[:8]}"
        trace.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}})
        trace.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
    tids: dict[tuple[str, str], int] = {}
    actors = events[["node", "actor", "role"]].drop_duplicates()
    for node, group in actors.groupby("node", sort=False):
        ordered = sorted(zip(group["actor"], group["role"]), key=lambda ar: _actor_key(*ar))
        for i, (actor, _) in enumerate(ordered):
            tid = i + 1
            tids[(node, actor)] = tid
            trace.append({"ph": "M", "name": "thread_name", "pid": pids[node], "tid": tid, "args": {"name": actor}})
            trace.append({"ph": "M", "name": "thread_sort_index", "pid": pids[node], "tid": tid,
                          "args": {"sort_index": tid}})
    columns = ["node", "actor", "role", "phase", "config_id", "repeat", "step", "start_ns", "duration_ns",
               "bytes", "staleness"]
    for node, actor, role, phase, config_id, repeat, step, start, dur, nbytes, stale in \
            events[columns].itertuples(index=False, name=None):
        args: dict[str, Any] = {"config": config_id, "repeat": int(repeat)}
        if step >= 0:
            args["step"] = int(step)
        if nbytes:
            args["bytes"] = int(nbytes)
        if stale >= 0:
            args["staleness"] = int(stale)
        trace.append({"ph": "X", "name": phase, "cat": role, "pid": pids[node], "tid": tids[(node, actor)],
                      "ts": (int(start) - origin_ns) / 1e3, "dur": int(dur) / 1e3, "args": args})
    return {"traceEvents": trace, "displayTimeUnit": "ms", "otherData": {"origin_ns": origin_ns}}
