"""Virtual workers on the plain classes, without Ray: several workers per process (threads),
grouped per node; and the push that carries the pull due after it (one call per shard)."""

import threading
import time

import numpy as np
import pytest

from actors.clock import StepClock
from actors.host import VirtualWorkers, events_before
from actors.server import ParameterServer
from actors.worker import LocalServerClient, Worker
from testbed.config.errors import UserError
from testbed.config.spec import parse_spec
from testbed.emulation.compute import GradientSource, initial_parameters
from testbed.emulation.hosting import PROCESSES_PER_CORE, group_workers, workers_per_process
from tests.factories import recorder as rec
from tests.factories import run_config as config


def shards_for(cfg):
    return [ParameterServer(shard=i, lo=lo, hi=hi, seed=cfg.seed, learning_rate=cfg.learning_rate,
                            recorder=rec(f"server-{i}", "server"), wait_timeout_s=20.0)
            for i, (lo, hi) in enumerate(cfg.shard_bounds())]


def processes_of(cfg, shards, per_process, clock=None, sleep=time.sleep):
    """``cfg.workers`` plain workers, ``per_process`` to a ``VirtualWorkers`` (a process)."""
    workers = [Worker(cfg, i, LocalServerClient(shards), rec(f"worker-{i}", "worker"), clock=clock, sleep=sleep)
               for i in range(cfg.workers)]
    return workers, [VirtualWorkers(workers[k:k + per_process]) for k in range(0, cfg.workers, per_process)]


def run_processes(processes, method="train"):
    """Each process's workers at once, the processes at once too (as on Ray)."""
    results, errors = {}, []

    def body(p, vw):
        try:
            results[p] = vw.each(method)
        except BaseException as err:  # surfaced below
            errors.append(err)
    threads = [threading.Thread(target=body, args=(p, vw)) for p, vw in enumerate(processes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    if errors:
        raise errors[0]
    return [results[p] for p in range(len(processes))]


def expected_parameters(cfg):
    grads = sum(GradientSource(cfg.seed, i, cfg.gradient_elements).expected_sum(cfg.steps) for i in range(cfg.workers))
    return initial_parameters(cfg.seed, 0, cfg.gradient_elements) - cfg.learning_rate * grads


@pytest.mark.parametrize("servers", [1, 3])
def test_two_processes_of_eight_virtual_workers_lose_no_update_and_end_exact(servers):
    cfg = config(workers=16, servers=servers, learning_rate=0.5, compute={"seconds": "2ms"})
    shards = shards_for(cfg)
    workers, processes = processes_of(cfg, shards, 8)
    assert [len(p.workers) for p in processes] == [8, 8]
    steps = run_processes(processes)
    assert steps == [[cfg.steps] * 8] * 2
    for s in shards:
        assert s.stats()["updates"] == 16 * cfg.steps
        assert s.stats()["pushes"] == {i: cfg.steps for i in range(16)}
    np.testing.assert_allclose(np.concatenate([s.parameters() for s in shards]), expected_parameters(cfg),
                               rtol=1e-5, atol=1e-5)
    for w in workers:  # each virtual worker recorded exactly its own steps, under its own name
        events = w.recorder.events()
        assert {e.actor for e in events} == {f"worker-{w.index}"}
        for phase in ("compute", "push", "pull"):
            assert sorted(e.step for e in events if e.phase == phase) == list(range(cfg.steps)), phase


def test_sleeping_virtual_workers_overlap_their_compute():
    # 8 workers x 6 steps x 20 ms of sleep in one process: in series that is ~1 s, overlapped ~0.12 s
    cfg = config(workers=8, compute={"seconds": "20ms"})
    shards = shards_for(cfg)
    workers, (process,) = processes_of(cfg, shards, 8)
    process.each("train")
    computes = [e for w in workers for e in w.recorder.events() if e.phase == "compute"]
    first = min(e.start_ns for e in computes)
    last = max(e.end_ns for e in computes)
    assert sum(e.duration_ns for e in computes) > 2 * (last - first)


def test_sync_barrier_holds_across_processes_and_virtual_workers():
    cfg = config(workers=6, servers=2, sync="sync", compute={"seconds": "1ms"})
    shards = shards_for(cfg)
    workers, processes = processes_of(cfg, shards, 3)
    run_processes(processes)
    for shard in shards:
        applies = [e for e in shard.recorder.events() if e.phase == "apply"]
        pulled = np.arange(len(applies)) - np.array([e.staleness for e in applies])
        assert (pulled == 6 * np.array([e.step for e in applies])).all()  # every push saw exactly N x k updates
    events = [e for w in workers for e in w.recorder.events()]
    for k in range(1, cfg.steps):  # no worker computes step k before every push of step k - 1 is applied
        last_apply = max(e.end_ns for s in shards for e in s.recorder.events() if e.phase == "apply" and e.step == k - 1)
        first_compute = min(e.start_ns for e in events if e.phase == "compute" and e.step == k)
        assert first_compute > last_apply
    for w in workers:
        assert w.versions == [6 * cfg.steps] * 2
        np.testing.assert_allclose(np.concatenate(w.params), expected_parameters(cfg), rtol=1e-5, atol=1e-5)
        for phase in ("push", "barrier", "pull"):
            assert sorted(e.step for e in w.recorder.events() if e.phase == phase) == list(range(cfg.steps))


def test_ssp_bound_holds_across_processes_and_virtual_workers():
    cfg = config(workers=6, sync="ssp", staleness=1, workload={"steps": 10})
    shards = shards_for(cfg)
    clock = StepClock(cfg.workers, 1, timeout_s=20.0)
    # worker 0 really sleeps its 1 ms steps, the others not at all: it alone holds them back
    workers = [Worker(cfg, i, LocalServerClient(shards), rec(f"worker-{i}", "worker"), clock=clock,
                      sleep=time.sleep if i == 0 else (lambda s: None)) for i in range(cfg.workers)]
    run_processes([VirtualWorkers(workers[:3]), VirtualWorkers(workers[3:])])
    assert clock.stats()["max_lead"] <= 1 and clock.stats()["waits"] > 0
    stale = [e.staleness for s in shards for e in s.recorder.events() if e.phase == "apply"]
    assert len(stale) == 60 and max(stale) <= cfg.staleness_bound


def test_a_failing_virtual_worker_fails_its_process_at_once():
    cfg = config(workers=3, sync="sync")
    shards = shards_for(cfg)
    for s in shards:
        s.wait_timeout_s = 5.0  # the others' barrier gives up after this; the error must come first
    workers, (process,) = processes_of(cfg, shards, 3, sleep=lambda s: None)
    workers[2].client = LocalServerClient([])  # pushes to no shard: zip() pushes nothing, so it fails below

    def broken(*args):
        raise ConnectionError("shard gone")
    workers[2].client.push_pull_at = broken
    t0 = time.monotonic()
    with pytest.raises(ConnectionError, match="shard gone"):
        process.each("train")
    assert time.monotonic() - t0 < 5.0  # at once, not after the others' barrier timeout


def test_push_pull_is_one_call_split_at_the_shards_end_of_the_push():
    cfg = config(pull_every=1)
    (shard,) = shards_for(cfg)
    shard.apply_extra_s = 0.005
    calls = []

    class Counting(LocalServerClient):
        def __getattribute__(self, name):
            if name in ("push", "pull", "push_pull", "pull_at", "push_pull_at"):
                calls.append(name)
            return super().__getattribute__(name)
    w = Worker(cfg, 0, Counting([shard]), rec("worker-0", "worker"), sleep=lambda s: None)
    w.train()
    assert calls == ["push_pull"] * cfg.steps  # one round trip per step
    events = w.recorder.events()
    pushes = [e for e in events if e.phase == "push"]
    pulls = [e for e in events if e.phase == "pull"]
    assert len(pushes) == len(pulls) == cfg.steps
    for push, pull in zip(pushes, pulls):
        assert push.duration_ns >= 5_000_000  # the 5 ms apply is the push's, not the pull's
        assert pull.start_ns == push.end_ns and pull.duration_ns < push.duration_ns
    assert w.versions == [cfg.steps]
    assert [e.staleness for e in shard.recorder.events() if e.phase == "apply"] == [0] * cfg.steps


def test_pull_every_k_pushes_alone_between_pulls_and_ssp_keeps_the_tick_between():
    cfg = config(pull_every=3)
    (shard,) = shards_for(cfg)
    w = Worker(cfg, 0, LocalServerClient([shard]), rec("worker-0", "worker"), sleep=lambda s: None)
    w.train()
    phases = [(e.phase, e.step) for e in w.recorder.events() if e.phase in ("push", "pull")]
    assert [s for p, s in phases if p == "pull"] == [2, 5]
    assert [s for p, s in phases if p == "push"] == list(range(6))


def test_events_of_a_step_in_progress_are_dropped_for_the_restart():
    r = rec("worker-0", "worker")
    r.record("init_read", -1, 1, 1)
    for step in range(3):
        r.record("compute", step, 10 + step, 1)
    r.record("push", 2, 20, 1)
    kept = events_before(r.export(), 2)
    again = rec("worker-0", "worker")
    again.restore(kept)
    assert [(e.phase, e.step) for e in again.events()] == [("init_read", -1), ("compute", 0), ("compute", 1)]
    assert events_before(r.export(), 3) is not None and len(events_before(r.export(), 3)["step"]) == 5


def test_position_of_a_worker_mid_step_is_the_start_of_that_step():
    cfg = config(compute={"seconds": "1ms", "jitter": {"distribution": "normal", "cv": 0.2}})
    (shard,) = shards_for(cfg)
    seen = {}

    def crash(step):  # a no-op hook: only marks that this worker may be restarted
        pass
    w = Worker(cfg, 0, LocalServerClient([shard]), rec("worker-0", "worker"), sleep=lambda s: None, crash=crash)
    real = w.compute.run

    def spy(step):
        if step == 3:
            seen["position"] = w.position()  # taken mid-step, as a sibling's crash would
        return real(step)
    w.compute.run = spy
    w.train(steps=3)
    at_three = w.rng.bit_generator.state
    w.train()
    assert seen["position"]["steps_done"] == 3 and seen["position"]["rng"] == at_three


def test_processes_per_node_are_a_small_multiple_of_its_cores():
    assert workers_per_process(256, 2) == 256 // (2 * PROCESSES_PER_CORE)
    assert workers_per_process(3, 2) == 1 and workers_per_process(1, 64) == 1
    assert workers_per_process(64, 2, requested=8) == 8 and workers_per_process(4, 2, requested=8) == 4
    groups = group_workers(["a"] * 256, {"a": 2.0})
    assert len(groups) == 2 * PROCESSES_PER_CORE and sorted(i for g in groups for i in g) == list(range(256))
    assert {len(g) for g in group_workers(["a"] * 10, {"a": 2.0})} == {2, 3}
    assert group_workers(["a"] * 10, {"a": 2.0}, requested=4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    # a process never hosts workers of two nodes
    mixed = group_workers(["a", "b", "a", "b", "a"], {"a": 1.0, "b": 1.0}, requested=8)
    assert mixed == [[0, 2, 4], [1, 3]]


def test_workers_per_process_is_validated_and_leaves_config_ids_alone():
    with pytest.raises(UserError, match="workers_per_process"):
        parse_spec({"name": "t", "workers_per_process": 0})
    assert config(workers_per_process=8).workers_per_process == 8
    assert config().config_id == config(workers_per_process=None).config_id
    assert config().config_id != config(workers_per_process=8).config_id


def test_cpu_bound_compute_gets_a_process_per_worker_unless_the_spec_says_otherwise():
    from testbed.runner.run import _workers_per_process
    assert _workers_per_process(config(workers=8, compute={"mode": "spin", "seconds": "1ms"})) == 1
    assert _workers_per_process(config(workers=8, compute={"mode": "matmul", "flops": 1e6})) == 1
    assert _workers_per_process(config(workers=8)) is None  # sleep: chosen per node
    assert _workers_per_process(config(workers=8, workers_per_process=4,
                                       compute={"mode": "spin", "seconds": "1ms"})) == 4


def test_the_threads_of_hosted_workers_start_before_init():
    cfg = config(workers=5)
    workers, processes = processes_of(cfg, shards_for(cfg), per_process=5)
    host = processes[0]
    assert len(host._pool._threads) == 0  # a pool starts its threads lazily
    assert host.start_threads() == 5
    threads = set(host._pool._threads)
    host.each("init")
    assert set(host._pool._threads) == threads  # init started none
    assert VirtualWorkers(workers[:1]).start_threads() == 0  # one worker runs inline
