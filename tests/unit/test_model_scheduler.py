"""The scheduler under load (testbed.model.scheduler) and how the simulated family reads it:
plain numbers and simulations, no processes (the probe itself is tested on real processes in
tests/integration/test_scheduler_probe.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from testbed.model import step_terms
from testbed.model.profile import DiskProfile, HardwareProfile
from testbed.model.scheduler import SchedulerCosts, coerce_scheduler, load_curve_at, monotone
from testbed.model.simfamily import sim_spec
from testbed.model.simulation import simulate
from testbed.model.terms import read_calls
from tests.unit.test_model_simulated import MS, config, profile

CURVE = ((0.0, 0.0), (2.0, 0.004), (8.0, 0.02))


def test_monotone_pools_a_dip_with_its_neighbours():
    assert monotone([(0, 0.0), (1, 3.0), (2, 1.0), (3, 4.0)]) == ((0, 0.0), (1, 2.0), (2, 2.0), (3, 4.0))
    assert monotone([(2, 5.0), (0, 1.0)]) == ((0, 1.0), (2, 5.0))  # sorted by load
    assert monotone([(0, -1.0), (1, 0.5)]) == ((0, 0.0), (1, 0.5))  # never below 0


@given(st.lists(st.tuples(st.integers(0, 50), st.floats(0, 1)), min_size=1, max_size=12, unique_by=lambda p: p[0]))
def test_property_monotone_is_non_decreasing_and_keeps_the_mean(points):
    out = monotone(points)
    values = [v for _, v in out]
    assert all(b >= a - 1e-12 for a, b in zip(values, values[1:]))
    assert sum(values) == pytest.approx(sum(y for _, y in points), abs=1e-9)
    assert [x for x, _ in out] == sorted(x for x, _ in points)


def test_load_curve_is_linear_between_points_and_flat_outside():
    assert load_curve_at(CURVE, 1.0) == pytest.approx(0.002)
    assert load_curve_at(CURVE, 5.0) == pytest.approx(0.012)
    assert load_curve_at(CURVE, 100.0) == 0.02
    assert load_curve_at(CURVE, 0.0) == 0.0
    assert load_curve_at((), 3.0) == 0.0


def test_scheduler_costs_check_their_points_and_survive_a_profile_round_trip():
    with pytest.raises(ValueError, match="load >= 0"):
        SchedulerCosts(spin_overshoot_s=((-1, 0.0),))
    with pytest.raises(ValueError, match="appears twice"):
        SchedulerCosts(wake_s=((1, 0.0), (1, 0.1)))
    with pytest.raises(ValueError, match="wake_first_s"):
        SchedulerCosts(wake_first_s=((1, -0.1),))
    with pytest.raises(ValueError, match="sleep_overshoot_s"):
        SchedulerCosts(sleep_overshoot_s=-1e-4)
    costs = SchedulerCosts(spin_overshoot_s=CURVE, wake_s=((0, 0.0), (4, 0.003)), cores=2, samples=20,
                           sleep_overshoot_s=1.5e-4, wake_first_s=((0, 0.0), (4, 0.004)))
    prof = dataclasses.replace(profile(), scheduler=costs)
    again = HardwareProfile.from_dict(json.loads(json.dumps(prof.to_dict())))
    assert again.scheduler == costs
    assert coerce_scheduler(None) is None
    assert HardwareProfile.from_dict({k: v for k, v in prof.to_dict().items() if k != "scheduler"}).scheduler is None
    # a profile from before version 25: no first wake, every call waits wake_s
    older = {k: v for k, v in costs.__dict__.items() if k != "wake_first_s"}
    assert HardwareProfile.from_dict({**prof.to_dict(), "scheduler": older}).scheduler.wake_first_s == ()


def test_an_emulated_applys_sleep_ends_late_by_the_calibrated_overshoot():
    from testbed.model.terms import emulated_apply_s
    late = dataclasses.replace(profile(), scheduler=SchedulerCosts(cores=2, sleep_overshoot_s=0.15e-3))
    cfg = config(workers=2, servers=2, apply_seconds=0.008)
    # each shard sleeps apply_seconds / S, and that sleep ends 0.15 ms late
    assert emulated_apply_s(cfg, late) == pytest.approx(0.004 + 0.15e-3)
    assert emulated_apply_s(cfg, profile()) == pytest.approx(0.004)  # without the figure: as asked
    assert emulated_apply_s(config(workers=2, servers=2), late) == 0.0  # no emulated apply: no sleep
    # the terms and the simulation hold it under the lock: one worker's push is that much longer
    alone = config(workers=1, servers=2, apply_seconds=0.008)
    t_late, t_plain = step_terms(alone, late), step_terms(alone, profile())
    assert t_late.apply_s - t_plain.apply_s == pytest.approx(0.15e-3)
    assert sim_spec(alone, late, t_late).apply_sleep_s == pytest.approx(0.004 + 0.15e-3)
    assert _run(alone, late).phases["apply"] - _run(alone, profile()).phases["apply"] == pytest.approx(0.15e-3, rel=1e-6)


def test_read_calls_follow_the_reader():
    data = {"workload": {"steps": 10, "dataset_bytes": 10**7, "minibatch": 8, "sample_bytes": 4096}}
    assert read_calls(config(**data, data={"step_reads": "random"})) == 8
    assert read_calls(config(**data, data={"step_reads": "sequential"})) == 1
    big = {"workload": {"steps": 10, "dataset_bytes": 10**8, "minibatch": 4, "sample_bytes": 3 * 2**20}}
    assert read_calls(config(**big, data={"step_reads": "random", "block_bytes": 2**20})) == 12
    assert read_calls(config(**big, data={"step_reads": "sequential", "block_bytes": 2**20})) == 12
    assert read_calls(config(**data)) == 0


def _run(cfg, prof):
    return simulate(sim_spec(cfg, prof, step_terms(cfg, prof)))


def test_a_lone_spin_ends_on_time_and_a_crowd_ends_late():
    sched = SchedulerCosts(spin_overshoot_s=CURVE, cores=2)
    spin = {"mode": "spin", "seconds": 0.01}
    lone = _run(config(workers=1, compute=spin), profile(cores_per_node=2, scheduler=sched))
    assert lone.phases["compute"] == pytest.approx(0.01, rel=1e-9)  # load 0: no overshoot
    crowd_cfg = config(workers=8, compute=spin)
    crowd = _run(crowd_cfg, profile(cores_per_node=2, scheduler=sched))
    plain = _run(crowd_cfg, profile(cores_per_node=2))
    # seven others spin on two cores most of the time: a load near 3.5, an overshoot near 7 ms
    assert 0.01 + 0.002 < crowd.phases["compute"] <= 0.01 + load_curve_at(CURVE, 3.5) * (1 + 1e-9)
    assert plain.phases["compute"] == pytest.approx(0.01, rel=1e-9)
    assert crowd.train_s > plain.train_s


def test_a_read_waits_a_wake_per_call_only_when_others_hold_the_cores():
    sched = SchedulerCosts(wake_s=((0.0, 0.0), (1.0, 0.001), (4.0, 0.004)), cores=2)
    data = {"workload": {"steps": 20, "dataset_bytes": 10**7, "minibatch": 8, "sample_bytes": 4096},
            "data": {"step_reads": "random"}}
    fast = DiskProfile(seq_read_bytes_per_s={1: 1e9, 2: 1.5e9}, block_bytes=4096)  # the disk is not the limit
    sleepy = config(workers=1, **data)
    assert _run(sleepy, profile(cores_per_node=2, disk=fast, scheduler=sched)).phases["read"] == \
        pytest.approx(_run(sleepy, profile(cores_per_node=2, disk=fast)).phases["read"], rel=1e-9)
    crowd = config(workers=6, compute={"mode": "spin", "seconds": 0.02}, **data)
    with_wake = _run(crowd, profile(cores_per_node=2, disk=fast, scheduler=sched)).phases["read"]
    without = _run(crowd, profile(cores_per_node=2, disk=fast)).phases["read"]
    # five others spinning on two cores, besides their bursts and the shard's: up to 8 calls x 4 ms more
    assert without + 8 * 0.001 < with_wake <= without + 8 * load_curve_at(sched.wake_s, 4.0) * (1 + 1e-9)


def test_a_read_waits_behind_bursts_of_rpc_work_as_behind_spinners():
    # sleeping workers: nobody spins, but their calls' CPU (2 ms a call) holds the cores
    sched = SchedulerCosts(wake_s=((0.0, 0.0), (1.0, 0.001), (4.0, 0.004)), cores=2)
    data = {"workload": {"steps": 30, "dataset_bytes": 10**7, "minibatch": 8, "sample_bytes": 4096},
            "data": {"step_reads": "random"}}
    fast = DiskProfile(seq_read_bytes_per_s={1: 1e9, 2: 1.5e9}, block_bytes=4096)
    extra = {"worker_cpu_per_step_s": 4 * MS}
    crowd = config(workers=8, compute={"mode": "sleep", "seconds": 0.005}, **data)
    with_wake = _run(crowd, profile(cores_per_node=2, disk=fast, scheduler=sched, extra=extra)).phases["read"]
    without = _run(crowd, profile(cores_per_node=2, disk=fast, extra=extra)).phases["read"]
    assert with_wake > without + 8 * 0.0005


def test_a_profile_without_the_scheduler_simulates_as_before():
    cfg = config(workers=4, compute={"mode": "spin", "seconds": 0.01}, gradient_bytes=400)
    extra = {"worker_cpu_per_step_s": 2 * MS}
    empty = SchedulerCosts(cores=2)
    assert _run(cfg, profile(cores_per_node=2, extra=extra)) == _run(cfg, profile(cores_per_node=2, extra=extra,
                                                                                 scheduler=empty))


def test_a_read_does_not_wait_behind_background_cpu():
    # Background CPU (served unwaited, in slivers) slows the bursts it shares the cores with, but a
    # woken reader does not wait a quantum behind it: the wake's load counts the bursts alone.
    sched = SchedulerCosts(wake_s=((0.0, 0.0), (1.0, 0.001), (4.0, 0.004)), cores=2)
    data = {"workload": {"steps": 30, "dataset_bytes": 10**7, "minibatch": 8, "sample_bytes": 4096},
            "data": {"step_reads": "random"}}
    fast = DiskProfile(seq_read_bytes_per_s={1: 1e9, 2: 1.5e9}, block_bytes=4096)
    cfg = config(workers=8, compute={"mode": "sleep", "seconds": 0.02}, **data)
    prof = profile(cores_per_node=2, disk=fast, scheduler=sched)
    spec = sim_spec(cfg, prof, step_terms(cfg, prof))
    alone = simulate(dataclasses.replace(spec, background_s=0.0))
    busy = simulate(dataclasses.replace(spec, background_s=5 * MS))
    # 8 x 5 ms of background a step on two cores is present most of the time: counted as load,
    # each of the 8 calls would wait ~1-2 ms more (the read near 8 ms); it is not counted
    assert busy.phases["read"] < 1.2 * alone.phases["read"]
    # the background still takes its share of the cores: the pushes' bursts stretch (compared
    # without the wakes, which move when the workers meet and so the pushes' queues either way)
    calm, crowded = (simulate(dataclasses.replace(spec, background_s=bg, wake=())) for bg in (0.0, 5 * MS))
    assert crowded.phases["push"] > 1.1 * calm.phases["push"]


def _read_only(spec, **changes):
    # the mean step read of ``spec`` simulated with ``changes`` (one worker in these tests: its
    # reads never share the disk, so the difference between two calls is the wakes alone)
    return simulate(dataclasses.replace(spec, **changes)).phases["read"]


def test_every_read_call_waits_a_wake():
    data = {"workload": {"steps": 20, "dataset_bytes": 10**7, "minibatch": 8, "sample_bytes": 4096},
            "data": {"step_reads": "random"}}
    fast = DiskProfile(seq_read_bytes_per_s={1: 1e9, 2: 1.5e9}, block_bytes=4096)
    cfg = config(workers=1, compute={"mode": "spin", "seconds": 0.02}, **data)
    prof = profile(cores_per_node=2, disk=fast)
    spec = sim_spec(cfg, prof, step_terms(cfg, prof))
    assert spec.read_ops == 8
    flat = ((0.0, 0.001),)  # the same wait at every load: the count of calls is what is tested
    assert _read_only(spec, wake=flat) == pytest.approx(_read_only(spec) + 8 * 0.001, rel=1e-6)
    # a sequential read of the minibatch is one call
    seq = config(workers=1, compute={"mode": "spin", "seconds": 0.02},
                 workload=data["workload"], data={"step_reads": "sequential"})
    one = sim_spec(seq, prof, step_terms(seq, prof))
    assert one.read_ops == 1
    assert _read_only(one, wake=flat) == pytest.approx(_read_only(one) + 0.001, rel=1e-6)


def test_the_first_wake_is_recorded_and_the_simulation_does_not_read_it():
    # Held out on 2026120422-23, the first call's own curve made the reads worse: recorded only.
    sched = SchedulerCosts(wake_s=((0.0, 0.0), (2.0, 0.001)), wake_first_s=((0.0, 0.0), (2.0, 0.003)), cores=2)
    data = {"workload": {"steps": 20, "dataset_bytes": 10**7, "minibatch": 8, "sample_bytes": 4096},
            "data": {"step_reads": "sequential"}}
    cfg = config(workers=6, compute={"mode": "spin", "seconds": 0.02}, **data)
    fast = DiskProfile(seq_read_bytes_per_s={1: 1e9, 2: 1.5e9}, block_bytes=4096)
    prof = profile(cores_per_node=2, disk=fast, scheduler=sched)
    without = dataclasses.replace(prof, scheduler=dataclasses.replace(sched, wake_first_s=()))
    assert _run(cfg, prof) == _run(cfg, without)


def test_a_step_read_takes_the_load_call_by_call(monkeypatch):
    # Four workers of a sync round read 8 calls each at the same moment; whoever is done first
    # starts to spin, so the others' later calls are woken among spinners, their first ones not.
    import testbed.model.simulation as simulation

    sched = SchedulerCosts(wake_s=((0.0, 0.0), (1.0, 0.001), (2.0, 0.002)), cores=2)
    data = {"workload": {"steps": 20, "dataset_bytes": 10**7, "minibatch": 8, "sample_bytes": 4096},
            "data": {"step_reads": "random"}}
    cfg = config(workers=4, sync="sync", compute={"mode": "spin", "seconds": 0.01}, **data)
    prof = profile(cores_per_node=2, scheduler=sched)
    spec = sim_spec(cfg, prof, step_terms(cfg, prof))
    seen: list[float] = []
    real = simulation.load_curve_at

    def recording(points, load):
        if points == spec.wake:
            seen.append(load)
        return real(points, load)

    monkeypatch.setattr(simulation, "load_curve_at", recording)
    simulate(spec)
    assert len(seen) == 4 * 20 * 8  # a wake per call, not one per step read
    # the calls of one read see different loads: some among spinners, some with none
    assert min(seen) == 0.0 and max(seen) > 0.0


# A reply to a caller held waiting (``SchedulerCosts.reply_wake_s``): 0.2 ms more after 2 ms held,
# 0.6 ms more from 10 ms on.
REPLY = ((0.0, 0.0), (0.002, 0.0002), (0.01, 0.0006), (0.02, 0.0006))


def test_reply_wake_points_from_the_calls_are_medians_beyond_an_answer_at_once():
    from testbed.calibration.scheduler import reply_wake_from_calls
    got = reply_wake_from_calls({0.0: [1e-3, 1.1e-3, 5e-3], 0.005: [1.4e-3, 1.5e-3, 1.6e-3],
                                 0.01: [1.3e-3, 1.4e-3, 9e-3], 0.02: [2e-3, 2e-3]})
    # the medians less 1.1 ms; the 10 ms hold's dip below 5 ms is pooled with it
    assert [x for x, _ in got] == [0.0, 0.005, 0.01, 0.02]
    assert [v for _, v in got] == pytest.approx([0.0, 0.35e-3, 0.35e-3, 0.9e-3])
    assert reply_wake_from_calls({0.005: [1e-3]}) == ()  # no call answered at once: nothing to stand on


def test_a_reply_after_an_emulated_apply_pays_the_wake_beyond_a_call_alone():
    # One worker, sync, 6 ms of emulated apply a step: its pull (after the round) comes back to a
    # caller held 6 ms longer than calibration's, so it pays the curve there less at the call alone.
    cfg = config(sync="sync", apply_seconds=0.006)
    prof = profile(cores_per_node=2)
    woken = dataclasses.replace(prof, scheduler=SchedulerCosts(reply_wake_s=REPLY, cores=2))
    spec = sim_spec(cfg, woken, step_terms(cfg, woken))
    before, after = simulate(sim_spec(cfg, prof, step_terms(cfg, prof))), simulate(spec)
    held = spec.push_pull_alone_s + spec.apply_sleep_s
    extra = load_curve_at(REPLY, held) - load_curve_at(REPLY, spec.push_pull_alone_s)
    assert extra > 1e-4
    assert after.phases["pull"] - before.phases["pull"] == pytest.approx(extra, rel=1e-6)
    assert after.phases["push"] == pytest.approx(before.phases["push"], rel=1e-9)
    # without the emulated apply the call is held as long as one alone: nothing more
    plain = config(sync="sync")
    assert simulate(sim_spec(plain, woken, step_terms(plain, woken))).phases["pull"] == pytest.approx(
        simulate(sim_spec(plain, prof, step_terms(plain, prof))).phases["pull"], rel=1e-9)


def test_a_reply_finds_no_idle_core_to_wake_among_spinners():
    # Six workers spinning 50 ms a step on two cores: no core idles while a call is held, so no
    # wake-up of an idle core (the caller waits its turn instead, which the curve does not hold).
    cfg = config(workers=6, sync="async", apply_seconds=0.004, compute={"mode": "spin", "seconds": 0.05})
    prof = profile(cores_per_node=2)
    woken = dataclasses.replace(prof, scheduler=SchedulerCosts(reply_wake_s=REPLY, cores=2))
    spec = sim_spec(cfg, woken, step_terms(cfg, woken))
    a, b = simulate(sim_spec(cfg, prof, step_terms(cfg, prof))), simulate(spec)
    # every call held at least the emulated apply beyond one alone: each would pay this on an idle node
    each = load_curve_at(REPLY, spec.push_pull_alone_s + spec.apply_sleep_s) - load_curve_at(REPLY, spec.push_pull_alone_s)
    assert each > 1e-4
    # only the first steps' calls, before every worker spins, find a core idle
    assert 0 <= b.phases["pull"] - a.phases["pull"] < 0.05 * each


def test_a_profile_before_version_29_has_no_reply_wake_and_bad_points_are_refused():
    assert SchedulerCosts().reply_wake_s == ()
    assert coerce_scheduler(json.loads(json.dumps(dataclasses.asdict(SchedulerCosts(reply_wake_s=REPLY))))).reply_wake_s == REPLY
    with pytest.raises(ValueError, match="reply_wake_s"):
        SchedulerCosts(reply_wake_s=((0.0, -1e-3),))
