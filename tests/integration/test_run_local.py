"""End to end on real local Ray: actors, timing, no lost update, the run folder."""

import numpy as np
import pytest

from testbed.config.spec import expand, parse_spec
from testbed.emulation.compute import GradientSource, initial_parameters
from testbed.records.rundir import RUN_FOLDER_ENTRIES, RunFolder
from testbed.records.summary import SUMMARY_COLUMNS
from testbed.runner.run import run_config, run_experiment

pytestmark = pytest.mark.integration


def make_spec(**fields):
    base = {"name": "it", "seed": 11, "workload": {"steps": 8}, "gradient_bytes": "256KiB",
            "compute": {"mode": "sleep", "seconds": "20ms"}, "learning_rate": 0.25}
    base.update(fields)
    return parse_spec(base)


@pytest.fixture(scope="module")
def outcome(ray_local):
    cfg = expand(make_spec(workers=3, servers=2, pull_every=2))[0]
    return cfg, run_config(cfg, 0, "run-test", keep_parameters=True)


def frame(outcome):
    import pandas as pd
    return pd.DataFrame(outcome.columns)


def test_no_update_is_lost(outcome):
    cfg, out = outcome
    pushed = sum(out.worker_steps)
    assert pushed == cfg.workers * cfg.steps
    assert [s["updates"] for s in out.server_stats] == [pushed, pushed]
    ev = frame(out)
    for shard in range(2):
        applies = ev[(ev.actor == f"server-{shard}") & (ev.phase == "apply")]
        assert len(applies) == pushed


def test_each_worker_recorded_exactly_steps_compute_and_push(outcome):
    cfg, out = outcome
    ev = frame(out)
    for i in range(cfg.workers):
        mine = ev[ev.actor == f"worker-{i}"]
        assert (mine.phase == "compute").sum() == cfg.steps
        assert (mine.phase == "push").sum() == cfg.steps
        assert (mine.phase == "pull").sum() == cfg.steps // cfg.pull_every
        assert sorted(mine[mine.phase == "compute"].step) == list(range(cfg.steps))


def test_sleep_compute_is_at_least_and_close_to_requested(outcome):
    cfg, out = outcome
    ev = frame(out)
    d = ev[ev.phase == "compute"].duration_ns.to_numpy() / 1e9
    assert d.min() >= cfg.compute.seconds
    assert np.median(d) - cfg.compute.seconds < 0.005


def test_final_parameters_equal_initial_minus_lr_times_every_gradient(outcome):
    cfg, out = outcome
    final = np.concatenate(out.parameters)
    grads = sum(GradientSource(cfg.seed, i, cfg.gradient_elements).expected_sum(cfg.steps)
                for i in range(cfg.workers))
    expected = initial_parameters(cfg.seed, 0, cfg.gradient_elements) - cfg.learning_rate * grads
    np.testing.assert_allclose(final, expected, rtol=1e-4, atol=1e-4)


def test_events_carry_node_and_phases_nest(outcome):
    _, out = outcome
    ev = frame(out)
    assert (ev.node.str.len() > 0).all()
    driver = ev[ev.role == "driver"].set_index("phase")
    train_start = driver.loc["train", "start_ns"]
    train_end = train_start + driver.loc["train", "duration_ns"]
    computes = ev[ev.phase == "compute"]
    assert computes.start_ns.min() >= train_start
    # wall clocks of one node: allow a millisecond of slack between the two clocks
    assert (computes.start_ns + computes.duration_ns).max() <= train_end + 1_000_000


def test_run_folder_loads_back(ray_local, tmp_path):
    spec = make_spec(workload={"steps": 4}, sweep={"workers": [1, 2]}, repeats=2)
    folder = run_experiment(spec, out=tmp_path / "run")
    assert {p.name for p in (tmp_path / "run").iterdir()} == set(RUN_FOLDER_ENTRIES)
    again = RunFolder.open(tmp_path / "run")
    assert again.manifest["status"] == "complete"
    assert len(again.manifest["finished"]) == 4
    summary = again.summary()
    assert list(summary.columns) == SUMMARY_COLUMNS
    assert list(summary.workers) == [1, 1, 2, 2]
    assert (summary.updates == summary.workers * 4).all()
    assert (summary.train_s > 0).all() and (summary.steps_per_s > 0).all()
    # every actor's CPU during training was read: workers and the shard used some
    assert (summary.worker_cpu_per_step_s > 0).all() and (summary.server_cpu_per_step_s > 0).all()
    events = again.events()
    assert set(events.config_id) == {c.config_id for c in expand(spec)}
    assert len(events) == len(folder.events())


def test_reused_actors_keep_their_processes_and_start_every_config_afresh(ray_local):
    """Calibration's sweep (``ReusedActors``): the second and third configs run in the first's
    processes, each from its own initial parameters and counts, and ``close`` ends them."""
    import ray

    from testbed.runner.run import ReusedActors

    cfgs = [expand(make_spec(workers=1, servers=shards, gradient_bytes=size, pull_every=1))[0]
            for shards, size in ((1, "64KiB"), (2, "256KiB"), (1, "16KiB"))]
    with ReusedActors() as pool:
        outs = [run_config(cfg, 0, "reuse-test", keep_parameters=True, reuse=pool) for cfg in cfgs]
        held = list(pool._actors.values())
        assert len(held) == 3  # worker-0's process and shards 0 and 1
        assert pool.made == 3  # started by the first two configs; the third started none
        assert all(ray.get([a.cpu_s.remote() for a in held]))  # alive until the pool closes
    pids = [{a: n["pid"] for a, n in out.nodes.items()} for out in outs]
    assert pids[0]["server-0"] == pids[1]["server-0"] == pids[2]["server-0"]
    assert pids[0]["worker-0"] == pids[1]["worker-0"] == pids[2]["worker-0"]
    for cfg, out in zip(cfgs, outs):
        assert out.worker_steps == [cfg.steps]
        assert [s["updates"] for s in out.server_stats] == [cfg.steps] * cfg.servers
        expected = (initial_parameters(cfg.seed, 0, cfg.gradient_elements)
                    - cfg.learning_rate * GradientSource(cfg.seed, 0, cfg.gradient_elements).expected_sum(cfg.steps))
        np.testing.assert_allclose(np.concatenate(out.parameters), expected, rtol=1e-4, atol=1e-4)
    for actor in held:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.cpu_s.remote(), timeout=30)


def test_a_calibration_run_says_whether_it_started_a_process(ray_local):
    """``RunPoint.fresh`` (the runs the init call is read from): the first run of a pool starts
    its processes, the next reuses them, and an ``ssp`` run starts its step clock."""
    from testbed.calibration.costs import run_point
    from testbed.runner.run import ReusedActors

    with ReusedActors() as pool:
        first, again = (run_point(4096, 1, 1, 4, pool) for _ in range(2))
        clocked = run_point(4096, 1, 1, 4, pool, plain_pulls=True)
    assert (first.fresh, again.fresh, clocked.fresh) == (True, False, True)
    assert first.init_s > 0 and again.init_s > 0


def test_reused_actors_refuse_a_config_they_cannot_reset(ray_local):
    from testbed.runner.run import ReusedActors

    with ReusedActors() as pool, pytest.raises(ValueError, match="single-worker"):
        run_config(expand(make_spec(workers=2))[0], 0, "reuse-test", reuse=pool)
