"""The simulated family against results that can be derived exactly: one worker (the closed
form), N workers in sync lock step (a burst per step), exponential service (exact MVA), the
init phase (the gate), stragglers, kills, and determinism.

Profile figures are round, as in test_model_families: L = 1 ms, W = 1 MB/s, A = 1 MB/s."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.config.spec import ConfigFields
from testbed.model import Centre, ModelFamily, init_seconds, predict, solve_mva, step_terms
from testbed.model.profile import DiskProfile, HardwareProfile, StepCpuLine, migrate_v1
from testbed.model.simfamily import sim_spec
from testbed.model.simkit import Mutex, SharedRate, cores_rate
from testbed.model.simulation import simulate
from testbed.model.terms import init_gate_s

MS = 1e-3


def profile(extra: dict | None = None, **changes) -> HardwareProfile:
    """Round figures; ``extra`` takes schema 1's figure names (migrated as an old profile is)."""
    typed = {k: v for k, v in migrate_v1({"extra": extra or {}}).items() if k != "schema_version"}
    if "step_cpu" in typed:
        typed["step_cpu"] = StepCpuLine(**typed["step_cpu"])
    changes = {**typed, **changes}
    base = dict(identity={}, cores_per_node=64, server_apply_bytes_per_s=1e6, server_call_overhead_s=MS,
                actor_call_latency_s=MS, transfer_bytes_per_s_local=1e6, flops_per_s=1e9,
                disk=DiskProfile(seq_read_bytes_per_s={1: 1e6, 2: 1.5e6, 4: 2e6}, block_bytes=4096))
    base.update(changes)
    return HardwareProfile(**base)


def config(**fields) -> ConfigFields:
    base = {"gradient_bytes": 1000, "compute": {"seconds": 0.01}, "workload": {"steps": 40}}
    base.update(fields)
    return ConfigFields.model_validate(base)


def run(cfg: ConfigFields, prof: HardwareProfile, **kw):
    return simulate(sim_spec(cfg, prof, step_terms(cfg, prof), **kw))


@pytest.mark.parametrize("fields,extra", [
    ({}, {}),
    # two shards, a pull every 2 steps, step reads, gradient production, calibrated RPC and shard CPU
    ({"servers": 2, "pull_every": 2, "data": {"step_reads": "sequential"},
      "workload": {"steps": 40, "dataset_bytes": 10**6, "minibatch": 4, "sample_bytes": 1000}},
     {"gradient_fill_bytes_per_s": 1e6, "worker_cpu_per_step_s": 2 * MS, "server_cpu_per_step_s": 3 * MS}),
    ({"apply_seconds": 0.004, "sync": "sync"}, {}),
    ({"sync": "ssp", "staleness": 1}, {}),
    # the clock's CPU calibrated: one worker's tick finds it idle, so still one call latency
    ({"sync": "ssp", "staleness": 1}, {"actor_call_cpu_s": 0.6 * MS, "actor_call_cpu_busy_s": 0.2 * MS}),
    # and the worker's own side of the tick: on a free core, within the same latency
    ({"sync": "ssp", "staleness": 1}, {"actor_call_cpu_s": 0.6 * MS, "actor_call_cpu_busy_s": 0.2 * MS,
                                       "actor_caller_cpu_s": 0.3 * MS}),
    # a plain push's answer: the two pushes of three that carry no pull, every ssp push, no sync push
    ({"servers": 2, "pull_every": 3, "workload": {"steps": 39}}, {"push_return_s": 0.5 * MS, "worker_cpu_per_step_s": 2 * MS}),
    ({"sync": "ssp", "staleness": 1, "pull_every": 2}, {"push_return_s": 0.5 * MS}),
    ({"sync": "sync"}, {"push_return_s": 0.5 * MS}),
])
def test_one_worker_equals_the_closed_form(fields, extra):
    cpu = {k: extra.pop(k) for k in ("actor_call_cpu_s", "actor_call_cpu_busy_s", "actor_caller_cpu_s",
                                     "push_return_s") if k in extra}
    cfg, prof = config(**fields), profile(extra=extra, **cpu)
    t = step_terms(cfg, prof)
    r = run(cfg, prof)
    clock = MS if cfg.sync.value == "ssp" else 0.0  # the tick of the step clock, every step but the last
    # Under async and sync a due pull travels with the push: no dispatch o of its own (the scalar
    # terms' s_pull holds one: o = s_push - a).
    dispatch = 0.0 if cfg.sync.value == "ssp" else t.push_service_s - t.apply_s
    step = t.read_s + t.compute_s + t.worker_extra_s + t.transfer_s + t.server_demand_s - dispatch / t.pull_every
    assert r.train_s == pytest.approx(cfg.steps * step + (cfg.steps - 1) * clock, rel=1e-9)
    assert r.phases["push"] == pytest.approx(t.push_event_transfer_s + t.push_service_s, rel=1e-9)
    assert r.phases["pull"] == pytest.approx(t.pull_transfer_s + t.pull_service_s - dispatch, rel=1e-9)
    assert r.phases["queue"] == pytest.approx(0.0, abs=1e-12)
    assert r.phases["apply"] == pytest.approx(t.apply_s, rel=1e-9)
    assert r.phases["read"] == pytest.approx(t.read_s, rel=1e-9)
    p = predict(cfg, prof, ModelFamily.SIMULATED)
    assert p.step_s == pytest.approx(step + clock * (cfg.steps - 1) / cfg.steps, rel=1e-9)


@pytest.mark.parametrize("workers", [2, 5, 16])
def test_sync_lock_step_pays_the_burst_every_step(workers):
    # o = 0 and free cores: every step the N pushes reach the shard together, apply one after
    # another (a each), the pulls wait for the last and share one copy, so the whole step is the
    # lone step plus (N - 1) applies; the k-th push in the burst waits (k - 1) a.
    prof = profile(server_call_overhead_s=0.0)
    cfg = config(workers=workers, sync="sync")
    t = step_terms(cfg, prof)
    lone = run(config(workers=1, sync="sync"), prof).train_s / cfg.steps
    r = run(cfg, prof)
    assert lone == pytest.approx(t.compute_s + t.transfer_s + t.server_demand_s, rel=1e-9)
    assert r.train_s / cfg.steps == pytest.approx(lone + (workers - 1) * t.apply_s, rel=1e-9)
    assert r.phases["queue"] == pytest.approx((workers - 1) / 2 * t.apply_s, rel=1e-9)
    # The worker served k-th waits at the barrier for the N - k applies after it, and all but the
    # first to take the lock then wait for its snapshot copy (o = 0: the copy is all of s_pull).
    copy = t.pull_service_s
    assert r.phases["barrier"] == pytest.approx((workers - 1) / 2 * t.apply_s + (workers - 1) / workers * copy,
                                                rel=1e-9)


@pytest.mark.parametrize("workers", [2, 5, 16])
@pytest.mark.parametrize("reply_over_apply", [0.5, 2.0])
def test_sync_replies_of_a_shared_snapshot_take_their_turns(workers, reply_over_apply):
    # As above, but each call that shares the round's snapshot pays its reply r, one after
    # another: the calls go out r apart, and so the next round's pushes arrive r apart (the
    # compute, 50 ms, outlasts the (N - 1) r of the replies). When r < a they still queue behind
    # the applies; when r > a the applies keep up and the round ends with its last reply. Each
    # round lasts lone + (N - 1) max(a, r), and the last one (N - 1) min(a, r) beyond.
    import dataclasses
    prof = profile(server_call_overhead_s=0.0)
    cfg = config(workers=workers, sync="sync", compute={"seconds": 0.05})
    t = step_terms(cfg, prof)
    a = t.apply_s
    r = reply_over_apply * a
    spec = dataclasses.replace(sim_spec(cfg, prof, t), reply_s=r)
    lone = simulate(dataclasses.replace(spec, workers=1)).train_s / cfg.steps
    with_replies = simulate(spec)
    rounds = cfg.steps * (lone + (workers - 1) * max(a, r))
    assert with_replies.train_s == pytest.approx(rounds + (workers - 1) * min(a, r), rel=1e-9)
    # The replies before a call's own are in its pull, not its wait (the shard records the
    # wait until it holds the lock again, and replies after letting it go): the k-th call to
    # share the snapshot pulls k r longer, (N - 1) / 2 r over the N calls.
    without = simulate(dataclasses.replace(spec, reply_s=0.0))
    assert with_replies.phases["pull"] == pytest.approx(without.phases["pull"] + (workers - 1) / 2 * r,
                                                        rel=1e-9)
    if r < a:  # the pushes still queue behind the applies: the waits are the same
        assert with_replies.phases["barrier"] == pytest.approx(without.phases["barrier"], rel=1e-9)
    else:  # the replies space the next round's pushes out: the early ones wait longer for the last
        assert with_replies.phases["barrier"] > without.phases["barrier"]


@pytest.mark.parametrize("workers", [2, 4, 8])
def test_exponential_service_matches_exact_mva(workers):
    # No pulls, no dispatch overhead, free cores: one FCFS centre of demand a, think time
    # c + t_push, which MVA solves exactly when the service is exponential.
    prof = profile(server_call_overhead_s=0.0)
    cfg = config(workers=workers, gradient_bytes=4000, pull_every=10**6, compute={"seconds": 0.008},
                 workload={"steps": 4000})
    t = step_terms(cfg, prof)
    r = run(cfg, prof, service="exponential")
    mva = solve_mva([Centre("server", t.apply_s)], t.compute_s + t.push_transfer_s, workers)
    assert r.steady_rate_per_s == pytest.approx(mva.throughput_per_s[workers], rel=0.02)
    assert r.server_utilization == pytest.approx(mva.utilization("server")[workers], rel=0.03)


def test_same_seed_same_result_and_the_seed_matters():
    cfg = config(workers=6, compute={"seconds": 0.01, "jitter": {"distribution": "lognormal", "cv": 0.3}})
    a, b = run(cfg, profile()), run(cfg, profile())
    assert a == b
    assert run(config(**{**cfg.model_dump(), "seed": 1}), profile()).train_s != a.train_s
    assert predict(cfg, profile(), ModelFamily.SIMULATED) == predict(cfg, profile(), ModelFamily.SIMULATED)


@pytest.mark.parametrize("partition,io", [("shard", "parallel"), ("shard", "sequential"), ("full", "sequential"),
                                          ("full", "parallel")])
@pytest.mark.parametrize("gate", [{}, {1: 0.004, 2: 0.007, 8: 0.03}])
@pytest.mark.parametrize("workers", [1, 4, 11])
@pytest.mark.parametrize("start", [0.0, 0.0005])
def test_init_through_the_gate_equals_the_closed_form(partition, io, gate, workers, start):
    prof = dataclasses.replace(profile(), init_gate_s_by_workers=gate)
    prof = dataclasses.replace(prof, disk=dataclasses.replace(prof.disk, read_start_s=start))
    cfg = config(workers=workers, workload={"steps": 10, "dataset_bytes": 1_000_000},
                 data={"partition": partition, "init_io": io})
    p = predict(cfg, prof, ModelFamily.SIMULATED)
    assert p.init_s == pytest.approx(init_seconds(cfg, prof, workers, ideal=False), rel=1e-9)
    if io == "sequential" and gate:
        # the calibrated gate's turns, not two call latencies a worker
        plain = predict(cfg, profile(), ModelFamily.SIMULATED).init_s
        turns = init_gate_s(prof, workers) - 2 * workers * prof.actor_call_latency_s
        assert p.init_s - plain == pytest.approx(turns + workers * start, rel=1e-9)


@pytest.mark.parametrize("io,starts", [("sequential", 11), ("parallel", 1)])
def test_the_first_read_after_idle_is_paid_by_every_reader_in_turn_or_once_side_by_side(io, starts):
    # 11 workers: through the gate the starts add up; all at once they overlap (a wait each,
    # not the disk's work, so a start is not shared out like the bytes are)
    base = profile()
    slow = dataclasses.replace(base, disk=dataclasses.replace(base.disk, read_start_s=0.002))
    cfg = config(workers=11, workload={"steps": 10, "dataset_bytes": 8_000_000}, data={"init_io": io})
    for family in (ModelFamily.SIMULATED, ModelFamily.QUEUEING):
        added = predict(cfg, slow, family).init_s - predict(cfg, base, family).init_s
        assert added == pytest.approx(starts * 0.002, rel=1e-6)


def test_processor_sharing_resource():
    # Two 1 s jobs on one core end together at 2 s; on two cores both at 1 s; a third job of
    # 0.5 s arriving with them on one core ends at 1.5 s (a third of the core each until then).
    for cores, works, ends in [(1, [1.0, 1.0], [2.0, 2.0]), (2, [1.0, 1.0], [1.0, 1.0]),
                               (1, [1.0, 1.0, 0.5], [2.5, 2.5, 1.5])]:
        env = simpy.Environment()
        cpu = SharedRate(env, cores_rate(cores), float(cores))
        got = {}
        for i, w in enumerate(works):
            cpu.serve(w).callbacks.append(lambda _e, i=i: got.__setitem__(i, env.now))
        env.run()
        assert [got[i] for i in range(len(works))] == pytest.approx(ends)
        assert cpu.utilization(env.now) == pytest.approx(sum(works) / (cores * env.now))


def test_unwaited_work_takes_its_share_and_fires_nothing():
    # A 1 s job and 1 s of background work on one core: the job ends at 2 s, no event for the other.
    env = simpy.Environment()
    cpu = SharedRate(env, cores_rate(1), 1.0)
    got = []
    cpu.serve_unwaited(1.0)
    cpu.serve(1.0).callbacks.append(lambda _e: got.append(env.now))
    assert (cpu.present, cpu.unwaited) == (2, 1)  # counted apart: a woken reader does not wait for it
    env.run()
    assert got == [pytest.approx(2.0)]
    assert cpu.present == 0 and cpu.unwaited == 0 and cpu.utilization(2.0) == pytest.approx(1.0)


def test_a_process_waiting_on_the_cores_resumes_when_its_work_is_done():
    # Processes that yield their bursts: 0.5 s and 1 s on one core end at 1 s and 1.5 s, and
    # each goes on with its next timeout from there.
    env = simpy.Environment()
    cpu = SharedRate(env, cores_rate(1), 1.0)
    ends = {}

    def proc(name, work):
        yield cpu.serve(work)
        ends[name, "burst"] = env.now
        yield env.timeout(0.25)
        ends[name, "after"] = env.now

    env.process(proc("a", 0.5))
    env.process(proc("b", 1.0))
    env.run()
    assert ends == pytest.approx({("a", "burst"): 1.0, ("a", "after"): 1.25,
                                  ("b", "burst"): 1.5, ("b", "after"): 1.75})


def test_the_mutex_is_handed_on_first_come_first_served():
    env = simpy.Environment()
    lock = Mutex(env)
    held = []

    def proc(name, arrive, hold):
        yield env.timeout(arrive)
        yield from lock.take()
        held.append((name, env.now))
        yield env.timeout(hold)
        lock.release()

    for name, arrive in [("a", 0.0), ("c", 0.2), ("b", 0.1)]:
        env.process(proc(name, arrive, 1.0))
    env.run()
    assert held == [("a", 0.0), ("b", 1.0), ("c", 2.0)]
    assert not lock.held
    # taken when free, it schedules no event of its own
    before = next(env._eid)
    assert list(lock.take()) == [] and lock.held and next(env._eid) == before + 1


def _handoff_order(seed: int) -> list[str]:
    """Four threads want a random-handoff lock held from 0 to 1: the order they get it in."""
    env = simpy.Environment()
    lock = Mutex(env, np.random.default_rng(seed))
    held = []

    def proc(name, arrive):
        yield env.timeout(arrive)
        yield from lock.take()
        held.append(name)
        yield env.timeout(1.0)
        lock.release()

    for name, arrive in [("a", 0.0), ("b", 0.1), ("c", 0.2), ("d", 0.3)]:
        env.process(proc(name, arrive))
    env.run()
    assert not lock.held
    return held


def test_a_random_handoff_serves_every_waiter_in_a_seeded_order():
    orders = [_handoff_order(seed) for seed in range(40)]
    # the holder first; every waiter once; the same seed, the same order
    assert all(o[0] == "a" and sorted(o) == ["a", "b", "c", "d"] for o in orders)
    assert _handoff_order(3) == orders[3]
    # not first come first served: each waiter is handed the lock first in some of the draws
    assert {o[1] for o in orders} == {"b", "c", "d"}


def test_cores_are_time_shared():
    # Four workers multiplying matrices for 10 ms (1e7 FLOPs at 1 GFLOP/s) on two cores: a fixed
    # amount of work, so their compute stretches towards twice its length.
    cfg = config(workers=4, compute={"mode": "matmul", "flops": 1e7}, gradient_bytes=400)
    r = run(cfg, profile(cores_per_node=2))
    assert 1.5 * 0.01 < r.phases["compute"] <= 2 * 0.01 * (1 + 1e-9)
    assert r.cpu_utilization > 0.9
    assert run(cfg, profile()).phases["compute"] == pytest.approx(0.01, rel=1e-9)


def test_spin_takes_a_core_for_exactly_its_duration():
    # The emulator's spin busy-waits until a wall-clock deadline: four spinning workers on two
    # cores still compute 10 ms each, but the cores they hold slow everyone else's CPU work.
    cfg = config(workers=4, compute={"mode": "spin", "seconds": 0.01}, gradient_bytes=400)
    extra = {"worker_cpu_per_step_s": 2 * MS}
    crowded = run(cfg, profile(cores_per_node=2, extra=extra))
    free = run(cfg, profile(cores_per_node=64, extra=extra))
    assert crowded.phases["compute"] == pytest.approx(0.01, rel=1e-9)
    assert free.phases["compute"] == pytest.approx(0.01, rel=1e-9)
    assert crowded.phases["push"] > 1.2 * free.phases["push"]  # the RPC CPU waits for a core
    assert crowded.cpu_utilization > free.cpu_utilization


def test_an_occupant_leaves_on_time_and_slows_the_jobs_while_present():
    env = simpy.Environment()
    cpu = SharedRate(env, cores_rate(1), 1.0)
    got = {}
    env.process(cpu.occupy(1.0))
    cpu.serve(1.0).callbacks.append(lambda _e: got.__setitem__("job", env.now))
    env.run()
    # one core: the job gets half of it while the occupant is there (1 s: 0.5 s of work), then all
    assert got["job"] == pytest.approx(1.5)
    assert cpu.utilization(got["job"]) == pytest.approx(1.0)  # the core was busy all along


def test_a_lock_held_while_waiting_for_a_core_slows_the_shard():
    # The apply is CPU under the lock: with the cores taken by spinning workers it takes longer,
    # which MVA's separate centres cannot show.
    cfg = config(workers=12, gradient_bytes=2000, compute={"mode": "spin", "seconds": 0.05})
    crowded = run(cfg, profile(cores_per_node=2))
    free = run(cfg, profile(cores_per_node=64))
    assert free.phases["apply"] == pytest.approx(0.002, rel=1e-9)
    assert crowded.phases["apply"] > 1.5 * free.phases["apply"]


def test_stragglers_and_ssp():
    slow = [{"kind": "straggler", "worker": 0, "factor": 3.0, "from_step": 10}]
    base = config(workers=4, faults=slow)
    t = step_terms(base, profile())
    p = predict(base, profile(), ModelFamily.SIMULATED)
    # a lone step; the due pull travels with the push, without a dispatch of its own
    lone = t.compute_s + t.transfer_s + t.server_demand_s - (t.push_service_s - t.apply_s)
    # async: the straggler finishes last, 2 c later for each of its 30 slowed steps; once slowed it
    # falls out of the others' lock-step burst, so its steps hardly queue (the lone step)
    assert p.train_s == pytest.approx(40 * lone + 30 * 2 * t.compute_s, rel=0.01)
    # and the slowed steps add no more than their extra compute to the run (within 1%: the first
    # ten steps still queue in the lock-step burst)
    assert p.train_s < 1.01 * (predict(config(workers=4), profile(), ModelFamily.SIMULATED).train_s
                               + 30 * 2 * t.compute_s)
    assert p.compute_s == pytest.approx(t.compute_s * (1 + 2 * 30 / (4 * 40)), rel=1e-9)
    # ssp with staleness 0: the others are held to the straggler's pace and wait at the clock
    ssp = run(config(workers=4, faults=slow, sync="ssp", staleness=0), profile())
    free = run(config(workers=4, faults=slow), profile())
    assert ssp.phases["barrier"] > 0.01 and free.phases["barrier"] == 0.0
    assert ssp.train_s >= free.train_s


def _tick_ends(env: simpy.Environment, clock, workers: int) -> list[float]:
    """When each of ``workers`` ticks, all made at time 0, came back."""
    ends: list[float] = []

    def worker(i):
        yield from clock.tick(i, 1)
        ends.append(env.now)

    for i in range(workers):
        env.process(worker(i))
    env.run()
    return ends


def test_the_ssp_clock_takes_its_ticks_in_turn_on_the_cores():
    from testbed.model.simactors import Node, SimClock
    cfg = config(workers=4, sync="ssp", staleness=10**6)
    env = simpy.Environment()
    node = Node(env, sim_spec(cfg, profile(), step_terms(cfg, profile())))  # 64 free cores
    call, idle_s, queued_s = MS, 0.6 * MS, 0.2 * MS
    done = _tick_ends(env, SimClock(env, 4, 10**6, call, node, idle_s, queued_s), 4)
    # four ticks at once: the first finds the clock idle (one call latency), each later one
    # waits for those before it and costs the queued figure
    assert done == pytest.approx([call, call + queued_s, call + 2 * queued_s, call + 3 * queued_s])
    # without its CPU the clock is a latency alone, however many tick at once
    env2 = simpy.Environment()
    assert _tick_ends(env2, SimClock(env2, 4, 10**6, call), 4) == pytest.approx([call] * 4)


def test_the_workers_side_of_a_tick_takes_a_core():
    from testbed.model.simactors import Node, SimClock
    cfg = config(workers=4, sync="ssp", staleness=10**6)
    call, caller = MS, 0.3 * MS

    def ends(cores: int, caller_s: float) -> list[float]:
        env = simpy.Environment()
        prof = profile(cores_per_node=cores)
        node = Node(env, sim_spec(cfg, prof, step_terms(cfg, prof)))
        return _tick_ends(env, SimClock(env, 4, 10**6, call, node, caller_cpu_s=caller_s), 4)

    # on free cores the caller's CPU is inside the call latency: four ticks at once, one call each
    assert ends(64, caller) == pytest.approx([call] * 4)
    # four at once on one core share it (processor sharing): each caller's 0.3 ms ends at 1.2 ms,
    # then the call's way there and back (1 ms less the 0.3 taken on the core)
    assert ends(1, caller) == pytest.approx([4 * caller + call - caller] * 4)
    assert ends(1, 0.0) == pytest.approx([call] * 4)  # uncalibrated: a latency alone
    # it is never more than the call latency leaves
    assert ends(64, 5 * MS) == pytest.approx([call] * 4)


def _applies_done(gil: bool, busy_s: float | None = None, second_at: float = MS) -> list[float]:
    """Two pushes to one shard, at 0 and ``second_at``: a 2 ms dispatch on a core (``busy_s`` for
    a call that finds the shard serving another; None: 2 ms too), then under the lock a 1 ms
    sleep (the emulated apply) and no CPU; when each push was done, in order."""
    import dataclasses

    from testbed.model.simactors import Node, Service, SimShard
    from testbed.model.simkit import Tally
    cfg = config(workers=2)
    base = sim_spec(cfg, profile(), step_terms(cfg, profile()))  # 64 free cores
    spec = dataclasses.replace(base, overhead_s=2 * MS, apply_cpu_s=0.0, apply_sleep_s=MS, copy_s=0.0, gil=gil,
                               overhead_busy_s=busy_s)
    env = simpy.Environment()
    shard = SimShard(env, spec, 0, Node(env, spec), Tally(), Service(np.random.default_rng(0), False))
    done: list[float] = []

    def push(at: float, worker: int):
        yield env.timeout(at)
        done.append((yield from shard.push(worker, 0)))

    env.process(push(0.0, 0))
    env.process(push(second_at, 1))
    env.run()
    return sorted(done)


def test_a_call_that_finds_the_shard_serving_another_is_dispatched_at_the_busy_cost():
    # The second push arrives at 1 ms, while the first is dispatched: its dispatch takes 0.5 ms
    # (2-2.5 ms, after the first's); the first's apply sleeps 2-3 ms and finds the interpreter
    # free again; the second then takes the lock and sleeps 3-4 ms.
    assert _applies_done(True, 0.5 * MS) == pytest.approx([3 * MS, 4 * MS])
    # Without the busy figure: the second's dispatch runs 2-4 ms, as before.
    assert _applies_done(True, None) == pytest.approx([4 * MS, 5 * MS])
    # A call that finds the shard idle (the first was done at 3 ms) pays the whole dispatch.
    assert _applies_done(True, 0.5 * MS, 3.5 * MS) == pytest.approx([3 * MS, 6.5 * MS])


def test_a_shard_back_from_the_applys_sleep_waits_for_its_interpreter():
    # Without the interpreter: the first push's apply sleeps 2-3 ms while the second's dispatch
    # runs beside it on another core (1-3 ms), then takes the lock and sleeps 3-4 ms.
    assert _applies_done(gil=False) == pytest.approx([3 * MS, 4 * MS])
    # With it: the second dispatch waits for the first's (it holds the interpreter until 2 ms),
    # runs 2-4 ms, and the first apply, back from its sleep at 3 ms, waits for it until 4 ms
    # (lock still held); the second then takes the lock and sleeps 4-5 ms.
    assert _applies_done(gil=True) == pytest.approx([4 * MS, 5 * MS])


def _reply_timeline(reply_outside: bool, busy_interpreter: bool = False, queued_call: bool = False,
                    handoff: str = "fifo", seed: int = 0) -> tuple[float, float]:
    """One shard: worker 0's push with its pull (push_pull) at 0, worker 1's push at 0.5 ms; no
    dispatch, a 1 ms apply on a core, a 2 ms copy of which 1.5 ms is the reply. Returns when
    worker 0's call and worker 1's push were done (optionally with something else holding the
    shard's interpreter from 1.5 to 2.5 ms; with ``queued_call``, it holds it from 1.0 ms and a
    call's dispatch of 1 ms waits for it from 1.2 ms)."""
    import dataclasses

    from testbed.model.simactors import Node, Service, SimShard
    from testbed.model.simkit import Tally
    cfg = config(workers=2)
    base = sim_spec(cfg, profile(), step_terms(cfg, profile()))  # 64 free cores
    spec = dataclasses.replace(base, overhead_s=0.0, apply_cpu_s=MS, apply_sleep_s=0.0, copy_s=2 * MS,
                               reply_s=1.5 * MS, gil=True, reply_outside=reply_outside,
                               gil_handoff=handoff, seed=seed)
    env = simpy.Environment()
    shard = SimShard(env, spec, 0, Node(env, spec), Tally(), Service(np.random.default_rng(0), False))
    done = {}

    def call(at: float, worker: int, copy: bool):
        yield env.timeout(at)
        yield from shard.push(worker, 0, copy=copy)
        done[worker] = env.now

    def other_thread(at: float, hold: float):
        yield env.timeout(at)
        yield from shard.gil.take()
        yield env.timeout(hold)
        shard.gil.release()

    env.process(call(0.0, 0, True))
    env.process(call(0.5 * MS, 1, False))
    if busy_interpreter:
        env.process(other_thread(1.5 * MS, MS))
    if queued_call:
        env.process(other_thread(1.0 * MS, 1.5 * MS))
        env.process(other_thread(1.2 * MS, MS))
    env.run()
    return done[0], done[1]


def test_a_pulls_reply_leaves_the_lock_and_takes_the_interpreter():
    # The whole copy under the lock: worker 0 holds it 0-3 ms, worker 1's apply runs 3-4 ms.
    assert _reply_timeline(False) == pytest.approx((3 * MS, 4 * MS))
    # The memory copy (0.5 ms) under the lock, the reply after it: the lock is free at 1.5 ms,
    # worker 1 applies 1.5-2.5 ms while worker 0's reply runs 1.5-3 ms.
    assert _reply_timeline(True) == pytest.approx((3 * MS, 2.5 * MS))
    # The reply holds the shard's interpreter: behind another thread's turn (1.5-2.5 ms) it
    # runs 2.5-4 ms; the lock, not needed for it, is as free as before.
    assert _reply_timeline(True, busy_interpreter=True) == pytest.approx((4 * MS, 2.5 * MS))


def test_a_pulls_reply_and_a_waiting_dispatch_take_the_interpreter_in_a_drawn_order():
    # The interpreter is held 1.0-2.5 ms; a call's dispatch waits for it from 1.2 ms, worker 0's
    # reply from 1.5 ms. First come first served: the dispatch runs 2.5-3.5 ms, the reply 3.5-5 ms.
    assert _reply_timeline(True, queued_call=True) == pytest.approx((5 * MS, 2.5 * MS))
    # Handed on at random: the reply runs 2.5-4 ms in some draws, 3.5-5 ms in the others; a
    # config's seed fixes which.
    ends = {round(_reply_timeline(True, queued_call=True, handoff="random", seed=s)[0] / MS, 9) for s in range(12)}
    assert ends == {4.0, 5.0}
    assert _reply_timeline(True, queued_call=True, handoff="random", seed=5) == \
        _reply_timeline(True, queued_call=True, handoff="random", seed=5)


def test_many_ssp_workers_wait_for_the_clock_longer_than_one_call():
    cfg = config(workers=16, sync="ssp", staleness=10**6, compute={"seconds": 0.01})
    quick = dict(server_call_overhead_s=1e-6, server_apply_bytes_per_s=1e12)  # pushes that do not spread the ticks
    free = run(cfg, profile(**quick))
    busy = run(cfg, profile(actor_call_cpu_s=0.6 * MS, actor_call_cpu_busy_s=0.3 * MS, **quick))
    assert free.phases["barrier"] == pytest.approx(MS, rel=1e-9)
    assert MS * 1.01 < busy.phases["barrier"] <= MS + 16 * 0.6 * MS
    alone = run(config(workers=1, sync="ssp", staleness=1), profile(actor_call_cpu_s=0.6 * MS,
                                                                     actor_call_cpu_busy_s=1e-9))
    assert alone.phases["barrier"] == pytest.approx(MS, rel=1e-9)


def test_kills_cost_a_restart():
    prof = profile(extra={"actor_setup_s": 0.5})
    killed = run(config(workers=2, restarts=1, faults=[{"kind": "kill_worker", "worker": 1, "step": 5}]), prof)
    plain = run(config(workers=2), prof)
    assert killed.train_s == pytest.approx(plain.train_s + 0.5, rel=0.01)
    down = run(config(workers=2, restarts=1, faults=[{"kind": "kill_server", "shard": 0, "update": 20}]), prof)
    assert down.train_s == pytest.approx(plain.train_s + 0.5, rel=0.05)


def test_prediction_has_a_knee_and_a_bound():
    p = predict(config(workers=8), profile(cores_per_node=2), ModelFamily.SIMULATED)
    assert p.model is ModelFamily.SIMULATED and p.knee_train_workers is not None
    assert 2 <= p.knee_train_workers <= 20 and p.knee_asymptotic is not None
    assert p.train_s == pytest.approx(p.steps * p.step_s) and p.server_utilization is not None
    assert all(np.isfinite(list(p.phases.values())))


def test_the_simulated_family_does_not_import_ray():
    code = ("import sys; from testbed.model import simfamily, simulation; "
            "bad = [m for m in ('ray', 'pandas') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    subprocess.run([sys.executable, "-c", code], check=True)


small_configs = st.fixed_dictionaries({
    "workers": st.integers(1, 12),
    "servers": st.integers(1, 3),
    "sync": st.sampled_from(["async", "sync", "ssp"]),
    "staleness": st.integers(0, 3),
    "gradient_bytes": st.integers(4, 5000).map(lambda n: 12 * n),
    "apply_seconds": st.sampled_from([0.0, 0.002]),
    "compute": st.fixed_dictionaries({
        "mode": st.sampled_from(["sleep", "spin"]), "seconds": st.floats(0.0, 0.02),
        "jitter": st.fixed_dictionaries({"distribution": st.sampled_from(["none", "uniform", "exponential"]),
                                         "cv": st.floats(0.0, 0.5)})}),
    "workload": st.fixed_dictionaries({"steps": st.integers(1, 30)}),
})


@settings(max_examples=12, deadline=None)
@given(fields=small_configs, cores=st.integers(1, 4), cpu=st.one_of(st.none(), st.floats(0.0, 2e-3)))
def test_property_simulated_prediction_is_consistent_and_never_beats_a_lone_worker(fields, cores, cpu):
    cfg = ConfigFields.model_validate(fields)
    prof = profile(cores_per_node=cores, extra={} if cpu is None else {"worker_cpu_per_step_s": cpu})
    t = step_terms(cfg, prof)
    p = predict(cfg, prof, ModelFamily.SIMULATED)
    assert p.total_s == pytest.approx(p.setup_s + p.init_s + p.train_s)
    assert p.train_s == pytest.approx(p.steps * p.step_s)
    assert all(v >= 0 for v in p.phases.values())
    # Contention only adds time: a step is never shorter than one worker's transfers and services
    # alone (its compute is left out, as jitter can shorten it; under async and sync a due pull
    # travels with the push, without a dispatch of its own).
    # With more shards than cores the worker's side gives up what the shards' services stretched
    # over the cores already hold (the calibrated one-worker call has it; docs/model.md "An
    # eleventh"), at most the stretch times their demand.
    dispatch = 0.0 if cfg.sync.value == "ssp" else (t.push_service_s - t.apply_s) / t.pull_every
    stretched = max(0.0, cfg.servers / t.cores - 1.0) * t.server_demand_s
    assert p.step_s >= (t.transfer_s + t.server_demand_s - dispatch - stretched) * (1 - 1e-9)
    assert 0 <= (p.server_utilization or 0) <= 1 + 1e-9
    assert p == predict(cfg, prof, ModelFamily.SIMULATED)


@pytest.mark.parametrize("distribution", ["uniform", "normal", "lognormal", "exponential"])
def test_the_simulated_jitter_is_each_emulated_workers_own(distribution):
    # The emulated worker i draws its factors from default_rng([seed, 3, i]), one a step
    # (actors/worker.py, ComputePlan.factor); the simulation draws the same ones.
    from testbed.emulation.compute import ComputePlan
    from testbed.model.simulation import _factors
    cfg = config(workers=3, seed=11, compute={"seconds": 0.01, "jitter": {"distribution": distribution, "cv": 0.4}})
    prof = profile()
    spec = sim_spec(cfg, prof, step_terms(cfg, prof))
    factors = _factors(spec)
    for i in range(cfg.workers):
        plan = ComputePlan(cfg.compute, np.random.default_rng([cfg.seed, 3, i]))
        assert factors[i].tolist() == pytest.approx([plan.factor() for _ in range(cfg.steps)], rel=1e-12)
    assert not np.allclose(factors[0], factors[1])


def test_the_object_stores_work_goes_with_the_transfers_of_slices_past_the_inline_limit():
    from testbed.model.curves import SizeCurve

    curve = SizeCurve(((4096.0, 0.6 * MS), (2.0 * 2**20, 3.8 * MS)))
    prof = profile(cores_per_node=2, ray_cpu_per_step_s=curve)
    big = config(gradient_bytes=2 * 2**20, sync="sync", compute={"seconds": 0.05})
    spec = sim_spec(big, prof, step_terms(big, prof))
    # the growth of Ray's CPU per step over the inline size, half at each transfer; the rest stays
    # in the background
    assert spec.store_s == pytest.approx(1.6 * MS)
    bare = sim_spec(big, profile(cores_per_node=2), step_terms(big, profile(cores_per_node=2)))
    assert spec.background_s - bare.background_s == pytest.approx(0.6 * MS)
    # slices inline in the call (2 MiB over 32 shards: 64 KiB each) carry no object
    split = config(gradient_bytes=2 * 2**20, servers=32, compute={"seconds": 0.05})
    assert sim_spec(split, prof, step_terms(split, prof)).store_s == 0.0
    # the calls' own costs as CPU (1-2 ms, as calibrated at 2 MiB), not the round figures' wire
    spec = dataclasses.replace(spec, push_cpu_s=1.6 * MS, push_wire_s=0.0, pull_cpu_s=1.5 * MS, pull_wire_s=0.0,
                               copy_s=1.0 * MS, reply_s=0.6 * MS, apply_cpu_s=0.35 * MS, overhead_s=1.8 * MS)
    # one worker on two cores: the store's work runs beside the call, which it does not slow
    one = simulate(spec)
    alone = simulate(dataclasses.replace(spec, store_s=0.0,
                                         background_s=spec.background_s + 3.2 * MS))
    for phase in ("push", "pull", "apply"):
        assert one.phases[phase] == pytest.approx(alone.phases[phase], rel=1e-6)
    # two workers pulling at once: the store's work for both takes the cores from their receives
    two = dataclasses.replace(spec, workers=2)
    with_store = simulate(two)
    without = simulate(dataclasses.replace(two, store_s=0.0,
                                           background_s=spec.background_s + 3.2 * MS))
    assert with_store.phases["pull"] > 1.05 * without.phases["pull"]


def test_a_push_hands_its_slices_to_the_shards_once_the_stores_work_for_them_is_done():
    from testbed.model.curves import SizeCurve

    curve = SizeCurve(((4096.0, 0.6 * MS), (2.0 * 2**20, 3.8 * MS)))
    prof = profile(cores_per_node=2, ray_cpu_per_step_s=curve)
    big = config(gradient_bytes=2 * 2**20, compute={"seconds": 0.05})
    spec = dataclasses.replace(sim_spec(big, prof, step_terms(big, prof)), push_cpu_s=1.0 * MS, push_wire_s=0.0,
                               push_return_cpu_s=0.0, push_return_wire_s=0.0, apply_cpu_s=0.5 * MS,
                               overhead_s=0.0, reply_wake=())
    assert spec.store_s == pytest.approx(1.6 * MS)
    # one core: the worker's side (1 ms) and the put's store work (1.6 ms) share it, so the
    # shards start the apply 2.6 ms into the push (the rule before: 1 ms, the store's work after)
    one_core = simulate(dataclasses.replace(spec, cores=1))
    no_store = simulate(dataclasses.replace(spec, cores=1, store_s=0.0))
    assert one_core.phases["push"] - no_store.phases["push"] == pytest.approx(1.6 * MS, rel=0.05)
    # two cores: the store's work runs on the other one, beside the worker's side: a push's
    # that is shorter than the side (0.8 ms) costs one worker nothing, a longer one (1.6 ms)
    # holds the shards back by the difference
    alone = simulate(dataclasses.replace(spec, store_s=0.0)).phases["push"]
    assert simulate(dataclasses.replace(spec, store_s=0.8 * MS)).phases["push"] == pytest.approx(alone, rel=1e-6)
    assert simulate(spec).phases["push"] - alone == pytest.approx(0.6 * MS, rel=0.05)
