"""The actors' plain classes, driven without Ray."""

import numpy as np
import pytest

from actors.server import ParameterServer
from actors.worker import LocalServerClient, Worker
from testbed.config.spec import Compute
from testbed.emulation.compute import ComputePlan, GradientSource, initial_parameters, matmul_size
from tests.factories import recorder as rec
from tests.factories import run_config as config


def build(cfg, sleeps=None):
    servers = [ParameterServer(shard=i, lo=lo, hi=hi, seed=cfg.seed, learning_rate=cfg.learning_rate,
                               recorder=rec(f"server-{i}", "server"))
               for i, (lo, hi) in enumerate(cfg.shard_bounds())]
    sleep = (lambda s: sleeps.append(s)) if sleeps is not None else (lambda s: None)
    workers = [Worker(cfg, i, LocalServerClient(servers), rec(f"worker-{i}", "worker"), sleep=sleep)
               for i in range(cfg.workers)]
    return servers, workers


@pytest.mark.parametrize("servers", [1, 3])
def test_final_parameters_equal_initial_minus_lr_times_all_gradients(servers):
    cfg = config(workers=3, servers=servers, learning_rate=0.5)
    shards, workers = build(cfg)
    for w in workers:
        w.train()
    final = np.concatenate([s.parameters() for s in shards])
    expected = initial_parameters(cfg.seed, 0, cfg.gradient_elements) - 0.5 * sum(
        GradientSource(cfg.seed, i, cfg.gradient_elements).expected_sum(cfg.steps) for i in range(3))
    np.testing.assert_allclose(final, expected, rtol=1e-5, atol=1e-5)
    assert all(s.stats()["updates"] == 3 * cfg.steps for s in shards)
    assert all(s.stats()["pushes"] == {0: 6, 1: 6, 2: 6} for s in shards)


def test_every_step_records_compute_and_push_and_pulls_every_k():
    cfg = config(pull_every=2)
    _, (w,) = build(cfg)
    w.train()
    phases = [e.phase for e in w.recorder.events()]
    assert phases.count("compute") == 6 and phases.count("push") == 6 and phases.count("pull") == 3


def test_gradient_buffer_is_reused_and_deterministic():
    a = GradientSource(7, 1, 1000)
    b = GradientSource(7, 1, 1000)
    g0 = a.fill(0)
    g3 = a.fill(3)
    assert g0 is g3  # one buffer, no allocation per step
    np.testing.assert_array_equal(g3, b.fill(3))
    assert not np.array_equal(GradientSource(7, 2, 1000).fill(3), g3)


def test_server_accepts_read_only_gradient_and_counts_staleness():
    s = ParameterServer(shard=0, lo=0, hi=4, seed=0, learning_rate=1.0, recorder=rec("server-0", "server"))
    g = np.ones(4, dtype=np.float32)
    g.flags.writeable = False
    before = s.parameters()
    s.push(g, worker=0, step=0, pulled_version=0)
    s.push(g, worker=1, step=0, pulled_version=0)
    np.testing.assert_allclose(s.parameters(), before - 2)
    applies = [e for e in s.recorder.events() if e.phase == "apply"]
    assert [e.staleness for e in applies] == [0, 1]
    with pytest.raises(ValueError, match="expects 4 values"):
        s.push(np.ones(3, dtype=np.float32), 0, 0)


def test_sleep_mode_asks_for_the_configured_duration():
    sleeps = []
    cfg = config(compute={"seconds": "3ms"})
    _, (w,) = build(cfg, sleeps)
    w.train()
    assert sleeps == [pytest.approx(0.003)] * 6


def test_jitter_has_mean_one_and_the_requested_spread():
    for dist in ("uniform", "normal", "lognormal", "exponential"):
        compute = Compute(seconds=1.0, jitter={"distribution": dist, "cv": 0.2})
        plan = ComputePlan(compute, np.random.default_rng(0))
        draws = np.array([plan.duration_s(i) for i in range(20_000)])
        assert draws.min() >= 0
        assert draws.mean() == pytest.approx(1.0, abs=0.02), dist
        assert draws.std() == pytest.approx(0.2, abs=0.03), dist


def test_jitter_is_reproducible_from_the_seed():
    compute = Compute(seconds=1.0, jitter={"distribution": "normal", "cv": 0.3})
    a = [ComputePlan(compute, np.random.default_rng(5)).duration_s(i) for i in range(3)]
    b = [ComputePlan(compute, np.random.default_rng(5)).duration_s(i) for i in range(3)]
    assert a == b


def test_matmul_size_matches_flops():
    n = matmul_size(2e6)
    assert 2 * n**3 == pytest.approx(2e6, rel=0.05)


def test_initial_parameters_are_the_same_whatever_the_sharding():
    whole = initial_parameters(3, 0, 3_000_000)
    np.testing.assert_array_equal(whole[1_000_000:2_500_000], initial_parameters(3, 1_000_000, 2_500_000))


def test_the_actors_reply_buffers_are_reused_per_thread_and_hold_each_reply():
    # reply_buffers >= 0 (the Ray actor): a thread's pulls reuse one buffer, touched up front,
    # and each reply holds the parameters as of its own call; another thread gets its own.
    import threading

    s = ParameterServer(shard=0, lo=0, hi=4, seed=0, learning_rate=1.0, recorder=rec("server-0", "server"),
                        reply_buffers=1)
    assert len(s._spare) == 1 and not s._rounds    # no sync rounds asked for: no snapshot buffers
    _, first = s.pull()
    before = first.copy()
    s.push(np.ones(4, dtype=np.float32), worker=0, step=0)
    _, second = s.pull()
    assert second is first and not s._spare        # the same buffer, from the spare
    np.testing.assert_allclose(second, before - 1.0)
    other = {}
    t = threading.Thread(target=lambda: other.setdefault("p", s.pull()[1]))
    t.start()
    t.join()
    assert other["p"] is not first
    np.testing.assert_allclose(other["p"], second)
    # A plain object (the default) answers every pull with a new array.
    plain = ParameterServer(shard=0, lo=0, hi=4, seed=0, learning_rate=1.0, recorder=rec("server-0", "server"))
    assert plain.pull()[1] is not plain.pull()[1]


def test_sync_rounds_alternate_two_snapshot_buffers():
    s = ParameterServer(shard=0, lo=0, hi=4, seed=0, learning_rate=1.0, recorder=rec("server-0", "server"),
                        reply_buffers=0, sync_rounds=True)
    seen = []
    for step in range(3):
        _, params, _, _ = s.push_pull_at(np.ones(4, dtype=np.float32), 0, step, -1, step + 1)
        seen.append((params, params.copy()))
    assert seen[0][0] is seen[2][0] and seen[0][0] is not seen[1][0]
    np.testing.assert_allclose(seen[1][1], seen[0][1] - 1.0)
    np.testing.assert_allclose(seen[2][0], seen[1][1] - 1.0)


def test_a_shard_touches_a_reply_buffer_for_every_thread_that_may_run_a_pull():
    # Ray hands a call to any free thread of the actor's pool: a buffer for each, touched before
    # the run, or a thread's first pull allocates and touches its own inside the timed pull.
    import threading

    from testbed.config.spec import ConfigFields
    from testbed.runner.run import shard_reply_buffers, shard_threads
    for sync in ("async", "ssp"):
        cfg = ConfigFields.model_validate({"workers": 1, "sync": sync, "gradient_bytes": 4096})
        assert shard_reply_buffers(cfg) == shard_threads(cfg) == 5
    assert shard_reply_buffers(ConfigFields.model_validate({"workers": 3, "sync": "sync", "gradient_bytes": 4096})) == 0
    s = ParameterServer(shard=0, lo=0, hi=4, seed=0, learning_rate=1.0, recorder=rec("server-0", "server"),
                        reply_buffers=shard_threads(cfg))
    spares = {id(b) for b in s._spare}
    got = []
    threads = [threading.Thread(target=lambda: got.append(s.pull()[1])) for _ in range(shard_threads(cfg))]
    for t in threads:
        t.start()
        t.join()
    assert {id(b) for b in got} == spares and not s._spare  # every thread's pull took a touched buffer
