"""Faults end to end on real local Ray: actors really die and Ray really restarts them."""

import pandas as pd
import pytest

from testbed.config.faults import lost_updates_expected
from testbed.config.spec import expand, parse_spec
from testbed.records.rundir import RunFolder
from testbed.runner.run import run_config, run_experiment

pytestmark = pytest.mark.integration


def make_cfg(**fields):
    base = {"name": "faults", "seed": 5, "workers": 2, "workload": {"steps": 10}, "gradient_bytes": "64KiB",
            "compute": {"mode": "sleep", "seconds": "10ms"}}
    base.update(fields)
    return expand(parse_spec(base))[0]


def test_kill_worker_restarts_it_at_its_step_and_the_run_completes(ray_local, tmp_path):
    cfg = make_cfg(faults=[{"kind": "kill_worker", "worker": 1, "step": 4}])
    out = run_config(cfg, 0, "run-kw", state_dir=tmp_path / "state")
    assert out.status == "ok" and out.worker_steps == [10, 10]
    assert [s["updates"] for s in out.server_stats] == [20] and out.lost_updates == 0
    ev = pd.DataFrame(out.columns)
    mine = ev[ev.actor == "worker-1"]
    # every step computed and pushed exactly once, the ones before the crash included (kept on disk)
    assert sorted(mine[mine.phase == "compute"].step) == list(range(10))
    assert sorted(mine[mine.phase == "push"].step) == list(range(10))
    (restart,) = mine[mine.phase == "restart"].itertuples()
    assert restart.step == 4 and restart.duration_ns > 0
    # the gap: nothing of worker 1 runs between its last push before the crash and the restart's end
    before = mine[(mine.phase == "push") & (mine.step == 3)].iloc[0]
    after = mine[(mine.phase == "compute") & (mine.step == 4)].iloc[0]
    assert before.start_ns + before.duration_ns <= restart.start_ns
    assert after.start_ns >= restart.start_ns + restart.duration_ns - 1_000_000
    assert not (tmp_path / "state").exists()  # the crash record is removed with the config


def test_straggler_computes_factor_times_longer(ray_local):
    cfg = make_cfg(faults=[{"kind": "straggler", "worker": 0, "factor": 4, "from_step": 5}])
    out = run_config(cfg, 0, "run-st")
    ev = pd.DataFrame(out.columns)
    compute = ev[ev.phase == "compute"].assign(s=lambda f: f.duration_ns / 1e9)
    slow = compute[(compute.actor == "worker-0") & (compute.step >= 5)].s
    early = compute[(compute.actor == "worker-0") & (compute.step < 5)].s
    other = compute[compute.actor == "worker-1"].s
    assert slow.min() >= 0.040 and slow.median() < 0.050
    assert early.median() < 0.015 and other.median() < 0.015
    assert out.status == "ok" and out.worker_steps == [10, 10]


@pytest.mark.parametrize("every,update", [(4, 10), (5, 10)])
def test_kill_server_loses_exactly_the_updates_since_its_checkpoint(ray_local, tmp_path, every, update):
    cfg = make_cfg(servers=2, checkpoint_every=every, faults=[{"kind": "kill_server", "shard": 1, "update": update}])
    out = run_config(cfg, 0, "run-ks", state_dir=tmp_path / "state")
    assert out.status == "ok" and out.worker_steps == [10, 10]
    shard0, shard1 = out.server_stats
    # Lost: the updates since the last checkpoint, less any whose reply had not left the dying
    # process (Ray retries that push and the restart applies it again).
    lost = lost_updates_expected(update, every) - shard1["retried_after_crash"]
    assert 0 <= shard1["retried_after_crash"] <= 2  # at most the two workers' pushes in flight
    assert (shard0["lost_updates"], shard0["restarts"], shard0["updates"]) == (0, 0, 20)
    assert (shard1["lost_updates"], shard1["restarts"], shard1["updates"]) == (lost, 1, 20 - lost)
    ev = pd.DataFrame(out.columns)
    s1 = ev[ev.actor == "server-1"]
    assert (s1.phase == "restart").sum() == 1
    # every push was applied once and timed, the lost ones too (acknowledged, then rolled back)
    assert (s1.phase == "apply").sum() == 20
    assert (s1.phase == "checkpoint").sum() == (update // every) + (20 - lost - (update // every) * every) // every


def test_a_config_past_its_deadline_is_timed_out_and_the_sweep_goes_on(ray_local, tmp_path):
    spec = parse_spec({"name": "deadline", "workers": 1, "compute": {"seconds": "20ms"}, "deadline_s": 4,
                       "sweep": {"workload.steps": [1000, 3]}})
    folder = run_experiment(spec, out=tmp_path / "run", monitor_interval_s=None)
    manifest = RunFolder.open(folder.path).manifest
    assert manifest["status"] == "complete"
    slow, quick = manifest["finished"]
    assert slow["status"] == "timed_out" and "deadline of 4 s" in slow["error"] and quick["status"] == "ok"
    summary = folder.summary()
    assert list(summary.status) == ["timed_out", "ok"]
    events = folder.events()
    kept = events[(events.config_id == slow["config_id"]) & (events.phase == "compute")]
    assert 20 < len(kept) < 1000  # what it computed before the deadline is kept
    assert "timed_out" in (folder.path / "summary.csv").read_text()
