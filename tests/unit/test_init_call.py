"""The init phase with nothing to read: the driver's call to every worker process, which grows
with the processes (calibrated fan-out curve), and the model's count of those processes."""

import pytest

from testbed.emulation.hosting import group_workers, process_count, requested_workers_per_process
from testbed.model.terms import init_call_s, init_gate_s, init_seconds, worker_processes
from tests.factories import profile, run_config


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 5, 7, 9, 16, 31, 64])
@pytest.mark.parametrize("cores", [1, 2, 8])
@pytest.mark.parametrize("requested", [None, 1, 3])
def test_process_count_matches_the_runners_grouping_on_one_node(workers, cores, requested):
    groups = group_workers(["n"] * workers, {"n": cores}, requested)
    assert process_count(workers, 1, cores, requested) == len(groups)


def test_process_count_over_nodes_matches_even_spread():
    nodes = ["a", "b", "c"] * 4 + ["a"]  # 13 workers: 5, 4, 4
    groups = group_workers(nodes, {"a": 2, "b": 2, "c": 2}, None)
    assert process_count(13, 3, 2, None) == len(groups)


def test_spin_and_matmul_get_a_process_each_sleep_is_grouped():
    assert requested_workers_per_process("spin", None) == 1
    assert requested_workers_per_process("matmul", None) == 1
    assert requested_workers_per_process("sleep", None) is None
    assert requested_workers_per_process("spin", 4) == 4
    p = profile(cores_per_node=2)
    assert worker_processes(run_config(compute={"mode": "spin", "seconds": "1ms"}), p, 31) == 31
    assert worker_processes(run_config(), p, 31) == 4


def test_init_call_is_the_fanout_curve_read_from_the_one_worker_figure():
    p = profile(init_call_s=0.001, init_fanout_s_by_actors={2: 0.0015, 8: 0.005, 16: 0.0098})
    assert init_call_s(p, 1) == 0.001
    assert init_call_s(p, 2) == pytest.approx(0.0015)  # the curve's own values at its counts
    assert init_call_s(p, 8) == pytest.approx(0.005)
    assert init_call_s(p, 5) == pytest.approx(0.0015 + 3 * (0.005 - 0.0015) / 6)  # linear between
    at_31 = 0.0098 + 15 * (0.0098 - 0.005) / 8  # beyond the curve: along its last segment
    assert init_call_s(p, 31) == pytest.approx(at_31)
    assert init_call_s(profile(init_call_s=0.001), 31) == 0.001  # no curve: the one figure
    # never below the one-process figure, whatever the curve says
    assert init_call_s(profile(init_call_s=0.003, init_fanout_s_by_actors={2: 0.002, 8: 0.004}), 2) == 0.003


def test_init_with_no_data_set_predicts_the_call_to_every_process():
    p = profile(init_call_s=0.001, init_fanout_s_by_actors={2: 0.0015, 8: 0.005})
    spin = run_config(compute={"mode": "spin", "seconds": "1ms"})
    assert init_seconds(spin, p, 8, ideal=False) == pytest.approx(init_call_s(p, 8))
    assert init_seconds(spin, p, 8, ideal=False) > init_seconds(run_config(), p, 8, ideal=False)
    assert init_seconds(spin, p, 8, ideal=True) == 0.0


def test_the_gates_turns_are_read_on_the_calibrated_curve():
    p = profile(init_gate_s_by_workers={1: 0.005, 2: 0.008, 8: 0.032, 16: 0.07})
    assert init_gate_s(p, 0) == 0.0
    assert init_gate_s(p, 1) == pytest.approx(0.005)
    assert init_gate_s(p, 5) == pytest.approx(0.008 + 3 * (0.032 - 0.008) / 6)  # linear between
    assert init_gate_s(p, 30) == pytest.approx(0.07 + 14 * (0.07 - 0.032) / 8)  # along the last segment
    assert init_gate_s(profile(init_gate_s_by_workers={4: 0.02}), 6) == pytest.approx(0.03)  # one point: per worker
    bare = profile()  # profiles before the gate was calibrated: two call latencies a worker
    assert init_gate_s(bare, 7) == pytest.approx(14 * bare.actor_call_latency_s)


def test_a_sequential_init_adds_the_gates_turns_to_the_reads():
    gate = {1: 0.005, 8: 0.04}
    seq = run_config(workload={"steps": 6, "dataset_bytes": 8_000_000}, data={"init_io": "sequential", "partition": "shard"})
    par = run_config(workload={"steps": 6, "dataset_bytes": 8_000_000}, data={"init_io": "parallel", "partition": "shard"})
    p = profile(init_gate_s_by_workers=gate)
    # the gate changes the sequential init only, by its turns
    assert init_seconds(par, p, 8, ideal=False) == init_seconds(par, profile(), 8, ideal=False)
    diff = init_seconds(seq, p, 8, ideal=False) - init_seconds(seq, profile(), 8, ideal=False)
    assert diff == pytest.approx(0.04 - 16 * profile().actor_call_latency_s)


def test_the_drivers_wake_up_after_the_reads_is_the_curve_at_the_phase_less_at_the_call():
    import dataclasses

    from testbed.model.families import ModelFamily
    from testbed.model.prediction import predict
    from testbed.model.scheduler import SchedulerCosts
    from testbed.model.terms import init_reply_wake_s

    curve = ((0.0, 0.0), (0.002, 0.0002), (0.01, 0.0006), (0.02, 0.001))
    woken = profile(init_call_s=0.001, scheduler=SchedulerCosts(reply_wake_s=curve))
    plain = dataclasses.replace(woken, scheduler=None)
    # read on the curve: at a 12 ms phase 0.68 ms, at the 1 ms call 0.1 ms; beyond 20 ms flat
    assert init_reply_wake_s(woken, 0.001, 0.012) == pytest.approx(0.00068 - 0.0001)
    assert init_reply_wake_s(woken, 0.001, 0.5) == pytest.approx(0.001 - 0.0001)
    assert init_reply_wake_s(woken, 0.001, 0.001) == 0.0  # nothing held beyond the call
    assert init_reply_wake_s(plain, 0.001, 0.5) == 0.0  # profiles without the curve
    for io in ("parallel", "sequential"):
        cfg = run_config(workers=3, workload={"steps": 6, "dataset_bytes": 8_000_000}, data={"init_io": io})
        before = init_seconds(cfg, plain, 3, ideal=False)
        call = init_call_s(woken, 3)
        assert init_seconds(cfg, woken, 3, ideal=False) == pytest.approx(
            before + init_reply_wake_s(woken, call, before))
        assert init_seconds(cfg, woken, 3, ideal=False) > before
        # the simulated family's init is the same closed form
        for family in (ModelFamily.SIMULATED, ModelFamily.QUEUEING):
            assert predict(cfg, woken, family).init_s == pytest.approx(init_seconds(cfg, woken, 3, ideal=False))
    # nothing to read: the call alone, which holds its own wake-up already
    empty = run_config()
    assert init_seconds(empty, woken, 3, ideal=False) == init_seconds(empty, plain, 3, ideal=False)


def test_hosting_several_workers_a_process_adds_the_calibrated_hand_out_to_the_init_call():
    from testbed.model.families import ModelFamily
    from testbed.model.prediction import predict
    from testbed.model.terms import init_driver_call_s, init_hosted_s

    hosted = {2: 0.0004, 8: 0.0007}
    p = profile(init_call_s=0.001, init_fanout_s_by_actors={2: 0.0015, 8: 0.005}, init_hosted_s_by_workers=hosted,
                init_hosted_processes=4)
    bare = profile(init_call_s=0.001, init_fanout_s_by_actors={2: 0.0015, 8: 0.005})
    sleep, spin = run_config(), run_config(compute={"mode": "spin", "seconds": "1ms"})
    # sleeping workers on 2 cores: 4 processes; 32 workers host 8 each, 16 host 4, 8 host 2
    assert init_hosted_s(sleep, p, 32) == pytest.approx(0.0007)
    assert init_hosted_s(sleep, p, 16) == pytest.approx(0.0004 + 2 * 0.0003 / 6)  # linear between
    assert init_hosted_s(sleep, p, 8) == pytest.approx(0.0004)
    assert init_hosted_s(sleep, p, 64) == pytest.approx(0.0007 + 8 * 0.0003 / 6)  # along the last segment
    # one worker a process (4 or fewer sleeping, every spinning one) runs inline: nothing
    for workers in (1, 3, 4):
        assert init_hosted_s(sleep, p, workers) == 0.0
    assert init_hosted_s(spin, p, 32) == 0.0
    # 6 workers: 3 processes of 2, their hand-outs sharing 2 cores: 3/4 of the figure at 4
    assert init_hosted_s(sleep, p, 6) == pytest.approx(0.0004 * 3 / 4)
    # a spec's own workers_per_process: 2 processes of 8 on 2 cores, half the figure at 4
    assert init_hosted_s(run_config(workers_per_process=8), p, 16) == pytest.approx(0.0007 * 2 / 4)
    assert init_hosted_s(sleep, bare, 32) == 0.0  # profiles before it was calibrated
    # the driver's call is the fan-out to the processes plus the hand-out, in every family but
    # the study's initial one, with and without a data set to read
    assert init_driver_call_s(sleep, p, 32) == pytest.approx(init_call_s(p, 4) + 0.0007)
    assert init_seconds(sleep, p, 32, ideal=False) == pytest.approx(init_seconds(sleep, bare, 32, ideal=False) + 0.0007)
    data = run_config(workers=32, workload={"steps": 6, "dataset_bytes": 8_000_000}, data={"init_io": "parallel"})
    for family in (ModelFamily.SIMULATED, ModelFamily.QUEUEING, ModelFamily.UPDATED):
        assert predict(data, p, family).init_s == pytest.approx(predict(data, bare, family).init_s + 0.0007, rel=1e-3)
    assert predict(data, p, ModelFamily.INITIAL).init_s == predict(data, bare, ModelFamily.INITIAL).init_s
