"""Init and step reads inside real runs: the gate orders the reads, parallel reads overlap,
and a memory-backed data directory is refused unless allowed (and then recorded)."""

import json
import os

import pytest

from testbed.config.errors import UserError
from testbed.config.spec import expand, parse_spec
from testbed.records import runqueue
from testbed.runner.run import run_config, run_experiment

pytestmark = pytest.mark.integration


def cfg(tmp_path, dataset="24MiB", **data):
    spec = parse_spec({"name": "io", "workload": {"steps": 3, "dataset_bytes": dataset, "sample_bytes": "4KiB",
                                                   "minibatch": 4},
                       "compute": {"seconds": "1ms"}, "gradient_bytes": "4KiB",
                       "data": {"dir": str(tmp_path / "data"), "file_bytes": "4MiB", **data},
                       "sweep": {"workers": [1, 3]}})
    return expand(spec)


def intervals(outcome, phase="init_read"):
    cols = outcome.columns
    rows = [(s, s + d, a) for p, s, d, a in zip(cols["phase"], cols["start_ns"], cols["duration_ns"], cols["actor"])
            if p == phase]
    return sorted(rows)


def test_sequential_init_reads_one_after_another(ray_local, tmp_path):
    small, large = cfg(tmp_path, init_io="sequential", partition="full")
    one = run_config(small, 0, "t")
    three = run_config(large, 0, "t")
    reads = intervals(three)
    assert len(reads) == 3
    for (_, end, _), (start, _, _) in zip(reads, reads[1:]):
        assert start >= end, "two workers read at the same time through the gate"
    waits = [d for p, d in zip(three.columns["phase"], three.columns["duration_ns"]) if p == "init_wait"]
    assert len(waits) == 3 and max(waits) > 0
    init = lambda o: [d for p, r, d in zip(o.columns["phase"], o.columns["role"], o.columns["duration_ns"])
                      if p == "init" and r == "driver"][0]
    assert init(three) > 1.5 * init(one)
    # every worker read the whole data set (partition: full)
    assert {b for p, b in zip(three.columns["phase"], three.columns["bytes"]) if p == "init_read"} == {24 * 2**20}


def test_the_data_set_is_read_once_untimed_before_init_unless_warm_pass_is_false(ray_local, tmp_path):
    one, _ = cfg(tmp_path, init_io="parallel", partition="full")
    warmed = run_config(one, 0, "t")
    assert [i.warmed_bytes for i in warmed.prepared.values()] == [24 * 2**20]
    assert all(i.warm_s > 0 for i in warmed.prepared.values())
    # untimed: the timed init is the worker's own read alone
    assert [b for p, b in zip(warmed.columns["phase"], warmed.columns["bytes"]) if p == "init_read"] == [24 * 2**20]
    cold, _ = cfg(tmp_path, init_io="parallel", partition="full", warm_pass=False)
    assert cold.config_id != one.config_id
    assert [i.warmed_bytes for i in run_config(cold, 0, "t").prepared.values()] == [0]


def test_parallel_init_reads_overlap_and_shards_split_the_data(ray_local, tmp_path):
    # 32 MiB a worker: each read lasts well beyond the few ms between the three workers' starts
    # (with 8 MiB each a fast disk read them in ~3 ms, and a loaded machine started them 5 ms apart)
    _, large = cfg(tmp_path, dataset="96MiB", init_io="parallel", partition="shard")
    out = run_config(large, 0, "t")
    reads = intervals(out)
    latest_start = max(s for s, _, _ in reads)
    earliest_end = min(e for _, e, _ in reads)
    assert latest_start < earliest_end, "parallel reads did not overlap"
    read_bytes = [b for p, b in zip(out.columns["phase"], out.columns["bytes"]) if p == "init_read"]
    assert sum(read_bytes) == 96 * 2**20 and len(read_bytes) == 3


def test_step_reads_are_timed_every_step(ray_local, tmp_path):
    small, _ = cfg(tmp_path, step_reads="random")
    out = run_config(small, 0, "t")
    reads = [b for p, b in zip(out.columns["phase"], out.columns["bytes"]) if p == "read"]
    assert reads == [4 * 4096] * 3
    # beside each read, its thread's wait for a core (Linux), never longer than the read
    if runqueue.waited_ns() is not None:
        by_step = {(p, st): d for p, st, d in zip(out.columns["phase"], out.columns["step"], out.columns["duration_ns"])
                   if p in ("read", "read_runq")}
        assert sorted(st for p, st in by_step if p == "read_runq") == [0, 1, 2]
        assert all(0 <= by_step["read_runq", st] <= by_step["read", st] + 1_000_000 for st in range(3))


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm on this system")
def test_tmpfs_is_refused_and_accepted_with_allow_cached(ray_local, tmp_path):
    shm = "/dev/shm/ddnn-testbed-test-" + str(os.getpid())
    base = {"name": "shm", "workload": {"steps": 2, "dataset_bytes": "1MiB"}, "compute": {"seconds": 0},
            "gradient_bytes": "4KiB", "data": {"dir": shm, "file_bytes": "1MiB"}}
    with pytest.raises(UserError, match="memory-backed file system"):
        run_experiment(parse_spec(base), out=tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    try:
        base["data"]["allow_cached"] = True
        folder = run_experiment(parse_spec(base), out=tmp_path / "allowed")
        manifest = json.loads((folder.path / "manifest.json").read_text())
        assert manifest["status"] == "complete" and manifest["cache_bypass"] is False
        assert manifest["data"][0]["fs_type"] == "tmpfs"
    finally:
        import shutil
        shutil.rmtree(shm, ignore_errors=True)
