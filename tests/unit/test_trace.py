"""Chrome-trace export: pure, from an events table."""

import json

import pandas as pd

from testbed.records.events import EVENT_SCHEMA
from testbed.records.trace import chrome_trace


def events(rows):
    names = [n for n, _, _ in EVENT_SCHEMA]
    return pd.DataFrame([dict(zip(names, r)) for r in rows], columns=names)


ROWS = [
    # run, config, repeat, actor, role, node, phase, step, start_ns, duration_ns, bytes, staleness
    ("r", "c0", 0, "driver", "driver", "nA", "train", -1, 1_000_000, 9_000_000, 0, -1),
    ("r", "c0", 0, "worker-10", "worker", "nB", "compute", 0, 2_000_000, 1_500, 0, -1),
    ("r", "c0", 0, "worker-2", "worker", "nB", "push", 0, 3_000_000, 2_000, 4096, -1),
    ("r", "c0", 0, "server-0", "server", "nA", "apply", 0, 3_500_000, 500, 4096, 1),
]


def test_one_process_per_node_one_thread_per_actor_one_complete_event_per_phase():
    trace = chrome_trace(events(ROWS), {"nA": "10.0.0.1", "nB": "10.0.0.2"})
    json.dumps(trace)  # JSON-ready
    ev = trace["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
    assert sorted(procs.values()) == ["node 10.0.0.1 nA", "node 10.0.0.2 nB"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    assert sorted(threads.values()) == ["driver", "server-0", "worker-10", "worker-2"]
    by_pid = {name: pid for pid, name in procs.items()}
    # threads sorted by role, then by numeric index: worker-2 before worker-10
    b = sorted((tid, name) for (pid, tid), name in threads.items() if pid == by_pid["node 10.0.0.2 nB"])
    assert [name for _, name in b] == ["worker-2", "worker-10"]
    a = sorted((tid, name) for (pid, tid), name in threads.items() if pid == by_pid["node 10.0.0.1 nA"])
    assert [name for _, name in a] == ["driver", "server-0"]
    complete = [e for e in ev if e["ph"] == "X"]
    assert len(complete) == len(ROWS)


def test_times_are_microseconds_from_the_first_event_and_args_keep_the_details():
    trace = chrome_trace(events(ROWS))
    assert trace["otherData"]["origin_ns"] == 1_000_000
    x = {e["name"]: e for e in trace["traceEvents"] if e["ph"] == "X"}
    assert x["train"]["ts"] == 0 and x["train"]["dur"] == 9_000
    assert x["compute"]["ts"] == 1_000 and x["compute"]["dur"] == 1.5
    assert x["compute"]["args"] == {"config": "c0", "repeat": 0, "step": 0}
    assert x["apply"]["args"] == {"config": "c0", "repeat": 0, "step": 0, "bytes": 4096, "staleness": 1}
    assert x["apply"]["cat"] == "server"
    assert "step" not in x["train"]["args"]


def test_an_empty_run_gives_an_empty_trace():
    assert chrome_trace(events([]))["traceEvents"] == []
