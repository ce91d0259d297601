"""Virtual workers on real local Ray: several workers per worker process, with exact update
counts and parameters, per-worker events, the barriers across processes, and a killed
process restarting all the workers it hosts."""

import numpy as np
import pandas as pd
import pytest

from testbed.config.spec import expand, parse_spec
from testbed.emulation.compute import GradientSource, initial_parameters
from testbed.runner.run import run_config

pytestmark = pytest.mark.integration


def make_cfg(**fields):
    base = {"name": "virtual", "seed": 3, "workers": 16, "workers_per_process": 8, "workload": {"steps": 8},
            "gradient_bytes": "64KiB", "compute": {"mode": "sleep", "seconds": "10ms"}, "learning_rate": 0.25}
    base.update(fields)
    return expand(parse_spec(base))[0]


@pytest.fixture(scope="module")
def async_run(ray_local):
    cfg = make_cfg(servers=2)
    return cfg, run_config(cfg, 0, "run-virtual", keep_parameters=True)


def test_two_processes_of_eight_lose_no_update_and_end_exact(async_run):
    cfg, out = async_run
    assert out.status == "ok" and out.worker_processes == [list(range(8)), list(range(8, 16))]
    assert out.worker_steps == [cfg.steps] * 16
    assert [s["updates"] for s in out.server_stats] == [16 * cfg.steps] * 2
    assert all(s["pushes"] == {i: cfg.steps for i in range(16)} for s in out.server_stats)
    grads = sum(GradientSource(cfg.seed, i, cfg.gradient_elements).expected_sum(cfg.steps) for i in range(16))
    expected = initial_parameters(cfg.seed, 0, cfg.gradient_elements) - cfg.learning_rate * grads
    np.testing.assert_allclose(np.concatenate(out.parameters), expected, rtol=1e-4, atol=1e-4)


def test_each_virtual_worker_records_exactly_its_steps_and_its_process(async_run):
    cfg, out = async_run
    ev = pd.DataFrame(out.columns)
    for i in range(16):
        mine = ev[ev.actor == f"worker-{i}"]
        for phase in ("compute", "push", "pull"):
            assert sorted(mine[mine.phase == phase].step) == list(range(cfg.steps)), (i, phase)
    pids = {i: out.nodes[f"worker-{i}"]["pid"] for i in range(16)}
    assert len({pids[i] for i in range(8)}) == 1 and len({pids[i] for i in range(8, 16)}) == 1
    assert pids[0] != pids[8]
    # CPU per process, and Ray's own processes' CPU while training (measured, if small)
    assert set(out.train_cpu_s) == {"server-0", "server-1", "worker-process-0", "worker-process-1"}
    assert {"raylet", "gcs_server"} <= set(out.ray_background_cpu_s)
    assert all(v >= 0 for v in out.ray_background_cpu_s.values())
    # the run's own processes are not background
    assert not {"ray::WorkerHost", "ray::ServerActor"} & set(out.ray_background_cpu_s)


@pytest.mark.parametrize("mode", ["sync", "ssp"])
def test_barriers_hold_across_processes_and_virtual_workers(ray_local, mode):
    fields = {"sync": mode, "workers": 6, "workers_per_process": 3, "servers": 2}
    if mode == "ssp":
        fields.update(staleness=1, compute={"seconds": "10ms", "jitter": {"distribution": "exponential", "cv": 1.0}})
    cfg = make_cfg(**fields)
    out = run_config(cfg, 0, f"run-virtual-{mode}")
    assert out.status == "ok" and len(out.worker_processes) == 2
    ev = pd.DataFrame(out.columns)
    applies = ev[ev.phase == "apply"]
    assert len(applies) == 2 * 6 * cfg.steps
    if mode == "sync":
        for shard in range(2):
            mine = applies[applies.actor == f"server-{shard}"]
            pulled = np.arange(len(mine)) - mine.staleness.to_numpy()
            assert (pulled == 6 * mine.step.to_numpy()).all()
        computes = ev[ev.phase == "compute"]
        for k in range(1, cfg.steps):
            assert computes[computes.step == k].start_ns.min() > (
                applies[applies.step == k - 1].start_ns + applies[applies.step == k - 1].duration_ns).max()
    else:
        assert applies.staleness.max() <= cfg.staleness_bound
        pushes = ev[(ev.role == "worker") & (ev.phase == "push")]
        push_end = {a: np.sort((g.start_ns + g.duration_ns).to_numpy()) for a, g in pushes.groupby("actor")}
        for row in ev[ev.phase == "compute"].itertuples():
            for other, ends in push_end.items():
                if other != row.actor:
                    assert row.step - np.searchsorted(ends, row.start_ns, side="right") <= cfg.staleness


def test_a_killed_worker_restarts_every_worker_of_its_process_and_only_those(ray_local, tmp_path):
    cfg = make_cfg(workers=8, workers_per_process=4, workload={"steps": 10},
                   faults=[{"kind": "kill_worker", "worker": 1, "step": 4}])
    out = run_config(cfg, 0, "run-virtual-kill", state_dir=tmp_path / "state")
    assert out.status == "ok" and out.worker_steps == [10] * 8
    assert [s["updates"] for s in out.server_stats] == [80] and out.lost_updates == 0
    ev = pd.DataFrame(out.columns)
    for i in range(8):
        mine = ev[ev.actor == f"worker-{i}"]
        # every step computed and pushed exactly once, whether or not the process died under it
        assert sorted(mine[mine.phase == "compute"].step) == list(range(10)), i
        assert sorted(mine[mine.phase == "push"].step) == list(range(10)), i
        restarts = mine[mine.phase == "restart"]
        assert len(restarts) == (1 if i < 4 else 0), i  # the killed worker's process: all four restart
    (killed,) = ev[(ev.actor == "worker-1") & (ev.phase == "restart")].itertuples()
    assert killed.step == 4


def test_sequential_init_orders_the_virtual_workers_of_one_process(ray_local, tmp_path):
    cfg = make_cfg(workers=4, workers_per_process=4, workload={"steps": 2, "dataset_bytes": "16MiB"},
                   data={"dir": str(tmp_path / "data"), "file_bytes": "4MiB", "init_io": "sequential",
                         "partition": "full"})
    out = run_config(cfg, 0, "run-virtual-gate")
    assert out.status == "ok" and out.worker_processes == [[0, 1, 2, 3]]
    ev = pd.DataFrame(out.columns)
    reads = ev[ev.phase == "init_read"].sort_values("start_ns")
    assert list(reads.actor) == [f"worker-{i}" for i in range(4)]  # the gate's order, inside one process
    ends = (reads.start_ns + reads.duration_ns).to_numpy()
    assert (reads.start_ns.to_numpy()[1:] >= ends[:-1]).all()  # one reader at a time
