"""Consistency modes (sync, ssp) on the plain classes, without Ray: one thread per worker."""

import threading
import time

import numpy as np
import pytest

from actors.clock import StepClock
from actors.server import ParameterServer
from actors.worker import LocalServerClient, Worker
from testbed.config.errors import UserError
from testbed.config.spec import parse_spec
from testbed.emulation.compute import GradientSource, initial_parameters
from tests.factories import recorder as rec
from tests.factories import run_config as config


def shards_for(cfg, timeout_s=10.0):
    return [ParameterServer(shard=i, lo=lo, hi=hi, seed=cfg.seed, learning_rate=cfg.learning_rate,
                            recorder=rec(f"server-{i}", "server"), wait_timeout_s=timeout_s)
            for i, (lo, hi) in enumerate(cfg.shard_bounds())]


def run_threads(workers):
    errors = []

    def body(w):
        try:
            w.train()
        except BaseException as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=body, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    if errors:
        raise errors[0]


class CapturingClient(LocalServerClient):
    """Calls the shards directly and keeps a copy of every pull of a version (the sync pull
    travels with the push: ``push_pull_at``)."""

    def __init__(self, servers):
        super().__init__(servers)
        self.pulls = []

    def push_pull_at(self, slices, worker, step, versions, version, during=None):
        out = super().push_pull_at(slices, worker, step, versions, version, during)
        self.pulls.append((version, np.concatenate([p for _, p, _, _ in out]).copy()))
        return out


def staleness_of(shards):
    return [e.staleness for s in shards for e in s.recorder.events() if e.phase == "apply"]


def test_sync_pulls_see_exactly_n_times_k_updates_and_final_parameters_are_exact():
    cfg = config(workers=3, servers=2, sync="sync", learning_rate=0.5)
    shards = shards_for(cfg)
    workers = [Worker(cfg, i, CapturingClient(shards), rec(f"worker-{i}", "worker"), sleep=lambda s: None)
               for i in range(cfg.workers)]
    run_threads(workers)
    sources = [GradientSource(cfg.seed, i, cfg.gradient_elements) for i in range(3)]
    initial = initial_parameters(cfg.seed, 0, cfg.gradient_elements)
    for w in workers:
        assert w.versions == [3 * cfg.steps] * 2
        # the pull after step k holds exactly the 3 x (k + 1) updates of steps 0..k, whatever the interleaving
        assert [v for v, _ in w.client.pulls] == [3 * (k + 1) for k in range(cfg.steps)]
        for k, (_, params) in enumerate(w.client.pulls):
            expected_k = initial - 0.5 * sum(src.expected_sum(k + 1) for src in sources)
            np.testing.assert_allclose(params, expected_k, rtol=1e-5, atol=1e-5)
        pulls = [e for e in w.recorder.events() if e.phase == "pull"]
        barriers = [e for e in w.recorder.events() if e.phase == "barrier"]
        assert [e.step for e in pulls] == list(range(cfg.steps)) == [e.step for e in barriers]
    # every worker ends with the same parameters: the ones after all N x steps updates
    expected = initial_parameters(cfg.seed, 0, cfg.gradient_elements) - 0.5 * sum(
        GradientSource(cfg.seed, i, cfg.gradient_elements).expected_sum(cfg.steps) for i in range(3))
    for w in workers:
        np.testing.assert_allclose(np.concatenate(w.params), expected, rtol=1e-5, atol=1e-5)
    assert max(staleness_of(shards)) <= cfg.staleness_bound == 2


def test_pull_at_returns_the_parameters_of_exactly_that_version():
    s = ParameterServer(shard=0, lo=0, hi=4, seed=0, learning_rate=1.0, recorder=rec("server-0", "server"),
                        wait_timeout_s=5.0)
    start = s.parameters()
    one = np.ones(4, dtype=np.float32)
    result = {}
    t = threading.Thread(target=lambda: result.update(v=s.pull_at(2)))
    t.start()
    s.push(one, worker=0, step=0, pulled_version=0)
    t.join(0.05)
    assert t.is_alive()  # one update short of the target: still waiting
    s.push(one, worker=1, step=0, pulled_version=0)
    t.join(5)
    version, params, waited_ns = result["v"]
    assert version == 2 and waited_ns > 0
    np.testing.assert_allclose(params, start - 2)
    # a later pull of the same version is served from the snapshot, not the moved-on parameters
    s.push(one, worker=0, step=1, pulled_version=2)
    np.testing.assert_allclose(s.pull_at(2)[1], start - 2)
    with pytest.raises(RuntimeError, match="out of lock step"):
        s.pull_at(1)


def test_pull_at_gives_up_after_the_timeout():
    s = ParameterServer(shard=3, lo=0, hi=4, seed=0, learning_rate=1.0, recorder=rec("server-3", "server"),
                        wait_timeout_s=0.05)
    with pytest.raises(TimeoutError, match="shard 3: waited 0.05s for version 1, still at 0"):
        s.pull_at(1)


def test_apply_extra_time_is_slept_inside_the_apply():
    sleeps = []
    s = ParameterServer(shard=0, lo=0, hi=4, seed=0, learning_rate=1.0, recorder=rec("server-0", "server"),
                        apply_extra_s=0.25, sleep=sleeps.append)
    s.push(np.ones(4, dtype=np.float32), worker=0, step=0)
    assert sleeps == [0.25]


def test_clock_holds_a_worker_more_than_s_steps_ahead():
    clock = StepClock(workers=2, staleness=1, timeout_s=5.0)
    assert clock.tick(0, 1) is False  # 1 ahead of worker 1: allowed
    done = threading.Event()
    t = threading.Thread(target=lambda: (clock.tick(0, 2), done.set()))
    t.start()
    assert not done.wait(0.05)  # 2 ahead: held
    clock.tick(1, 1)
    assert done.wait(5)
    t.join()
    assert clock.stats() == {"completed": [2, 1], "waits": 1, "max_lead": 1}


def test_clock_times_out_naming_the_slow_worker_and_rejects_bad_ticks():
    clock = StepClock(workers=3, staleness=0, timeout_s=0.05)
    with pytest.raises(TimeoutError, match="worker 1 is stuck at 0 completed steps"):
        clock.tick(0, 1)
    with pytest.raises(ValueError, match="went back"):
        clock.tick(0, 0)
    with pytest.raises(ValueError, match="not one of the 3 workers"):
        clock.tick(3, 1)


@pytest.mark.parametrize("staleness", [0, 2])
def test_ssp_keeps_staleness_within_the_bound_with_a_slow_worker(staleness):
    cfg = config(workers=3, sync="ssp", staleness=staleness, workload={"steps": 12})
    shards = shards_for(cfg)
    clock = StepClock(cfg.workers, staleness, timeout_s=10.0)
    # worker 0 really sleeps its 1 ms steps, the others not at all: it alone holds them back
    workers = [Worker(cfg, i, LocalServerClient(shards), rec(f"worker-{i}", "worker"), clock=clock,
                      sleep=time.sleep if i == 0 else (lambda s: None))
               for i in range(cfg.workers)]
    run_threads(workers)
    stale = staleness_of(shards)
    assert len(stale) == 3 * 12
    assert max(stale) <= cfg.staleness_bound == 2 * (2 * staleness + 1)
    assert clock.stats()["max_lead"] <= staleness
    assert clock.stats()["waits"] > 0  # the fast workers really were held
    assert sum(e.phase == "barrier" for w in workers for e in w.recorder.events()) == 3 * 11


def test_worker_needs_a_clock_exactly_in_ssp():
    with pytest.raises(ValueError, match="step clock"):
        Worker(config(sync="ssp"), 0, LocalServerClient([]), rec("worker-0", "worker"))
    with pytest.raises(ValueError, match="step clock"):
        Worker(config(), 0, LocalServerClient([]), rec("worker-0", "worker"), clock=StepClock(1, 0))


def test_async_with_one_worker_has_no_staleness():
    cfg = config()
    shards = shards_for(cfg)
    Worker(cfg, 0, LocalServerClient(shards), rec("worker-0", "worker"), sleep=lambda s: None).train()
    assert staleness_of(shards) == [0] * cfg.steps == [0] * 6


def test_spec_checks_and_staleness_bounds():
    with pytest.raises(UserError, match="pull_every must be 1"):
        parse_spec({"name": "t", "sync": "sync", "pull_every": 2})
    assert config(workers=4, sync="sync").staleness_bound == 3
    assert config(workers=4, sync="ssp", staleness=2).staleness_bound == 15
    assert config(workers=4, sync="ssp", staleness=2, pull_every=3).staleness_bound == 2 + 3 * 7
    assert config(workers=4).staleness_bound is None
    assert config(workers=1, pull_every=3).staleness_bound == 2
    assert config(deadline_s="7s").barrier_timeout_s == 7.0
    assert config(apply_seconds="5ms").apply_seconds == pytest.approx(0.005)


class StampedClient(LocalServerClient):
    """Answers ``push_pull_at`` with given shard stamps (ns after the call began): each shard
    done with the push at ``pushed[i]``, then waiting ``waited[i]``; the call takes ``total``
    on ``clock``, a fake clock that moves only here (so the split is exact on a loaded machine:
    with real time the test failed once while other work shared the cores)."""

    def __init__(self, servers, recorder, pushed, waited, total, clock):
        super().__init__(servers)
        self.recorder, self.pushed, self.waited, self.total, self.clock = recorder, pushed, waited, total, clock

    def push_pull_at(self, slices, worker, step, versions, version, during=None):
        wall0, _ = self.recorder.now()
        self.clock[0] += self.total
        return [(version, np.zeros(len(s), np.float32), w, wall0 + p)
                for s, p, w in zip(slices, self.pushed, self.waited)]


def test_the_sync_barrier_runs_from_the_push_to_the_last_release_and_the_pull_is_the_rest():
    # Two shards: A done with the push at 1 ms and waits 10 ms; B done at 5 ms and waits 6 ms;
    # both let the call go at 11 ms, and the call ends at 20 ms. Push 5 ms, barrier 6 ms (not
    # A's 10 ms wait, which overlaps the push), pull 9 ms.
    cfg = config(workers=1, servers=2, sync="sync", gradient_bytes=64, workload={"steps": 1},
                 compute={"seconds": 0.0})
    clock = [0]
    r = rec("worker-0", "worker", wall_ns=lambda: 10**18 + clock[0], mono_ns=lambda: clock[0])
    ms = 1_000_000
    client = StampedClient(shards_for(cfg), r, pushed=[1 * ms, 5 * ms], waited=[10 * ms, 6 * ms], total=20 * ms,
                           clock=clock)
    Worker(cfg, 0, client, r).train()
    got = {e.phase: e.duration_ns / ms for e in r.events() if e.phase in ("push", "barrier", "pull")}
    assert got["push"] == pytest.approx(5)
    assert got["barrier"] == pytest.approx(6)
    assert got["pull"] == pytest.approx(9)
    assert sum(got.values()) == pytest.approx(20)
