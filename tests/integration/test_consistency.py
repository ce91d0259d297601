"""Shards and consistency modes on real local Ray: exact parameters per slice, the sync
barrier, the ssp bound, and the step rate that sharding buys when applies are heavy."""

import time

import numpy as np
import pandas as pd
import pytest

from testbed.config.spec import expand, parse_spec
from testbed.emulation.compute import GradientSource, initial_parameters
from testbed.runner.run import _get_fail_fast, run_config

pytestmark = pytest.mark.integration


def make_cfg(**fields):
    base = {"name": "cons", "seed": 5, "workload": {"steps": 8}, "gradient_bytes": "96KiB",
            "compute": {"mode": "sleep", "seconds": "10ms"}, "learning_rate": 0.125}
    base.update(fields)
    return expand(parse_spec(base))[0]


MODES = {
    "async": dict(workers=3, servers=3),
    "sync": dict(workers=3, servers=2, sync="sync"),
    # exponential jitter spreads the workers apart, so the clock has something to hold back
    "ssp": dict(workers=3, servers=2, sync="ssp", staleness=1, workload={"steps": 12},
                compute={"seconds": "10ms", "jitter": {"distribution": "exponential", "cv": 1.0}}),
}


@pytest.fixture(scope="module")
def runs(ray_local):
    out = {}
    for name, fields in MODES.items():
        cfg = make_cfg(**fields)
        out[name] = (cfg, run_config(cfg, 0, f"run-{name}", keep_parameters=True))
    return out


def events(outcome) -> pd.DataFrame:
    return pd.DataFrame(outcome.columns)


def end_ns(frame):
    return frame.start_ns + frame.duration_ns


def applies_by_shard(cfg, outcome):
    ev = events(outcome)
    return {shard: ev[(ev.actor == f"server-{shard}") & (ev.phase == "apply")] for shard in range(cfg.servers)}


@pytest.mark.parametrize("mode", list(MODES))
def test_each_shard_applies_every_push_it_received_and_ends_exact(runs, mode):
    cfg, out = runs[mode]
    sources = [GradientSource(cfg.seed, i, cfg.gradient_elements) for i in range(cfg.workers)]
    grads = sum(src.expected_sum(cfg.steps) for src in sources)
    applies = applies_by_shard(cfg, out)
    for stats, params, (lo, hi) in zip(out.server_stats, out.parameters, cfg.shard_bounds()):
        shard = stats["shard"]
        assert stats["pushes"] == {i: cfg.steps for i in range(cfg.workers)}
        assert stats["updates"] == sum(stats["pushes"].values()) == len(applies[shard])
        assert (applies[shard].bytes == (hi - lo) * 4).all()  # each shard got its slice, not the gradient
        expected = initial_parameters(cfg.seed, lo, hi) - cfg.learning_rate * grads[lo:hi]
        np.testing.assert_allclose(params, expected, rtol=1e-4, atol=1e-4)
    sizes = [hi - lo for lo, hi in cfg.shard_bounds()]
    assert len(sizes) == cfg.servers and max(sizes) - min(sizes) <= 1


def test_sync_pushes_carry_exactly_n_times_k_updates(runs):
    # A shard's i-th apply happens at version i; minus its staleness that is the version the
    # worker pulled before pushing. After step k every pull must have returned N x (k + 1).
    cfg, out = runs["sync"]
    for shard, applies in applies_by_shard(cfg, out).items():
        pulled = np.arange(len(applies)) - applies.staleness.to_numpy()
        assert (pulled == cfg.workers * applies.step.to_numpy()).all(), shard
        assert applies.staleness.max() <= cfg.staleness_bound == cfg.workers - 1


def test_sync_no_worker_starts_a_step_before_the_last_step_is_applied_everywhere(runs):
    cfg, out = runs["sync"]
    ev = events(out)
    applies = ev[(ev.role == "server") & (ev.phase == "apply")]
    computes = ev[(ev.role == "worker") & (ev.phase == "compute")]
    margins = []
    for k in range(1, cfg.steps):
        last_apply_of_previous = end_ns(applies[applies.step == k - 1]).max()
        first_compute = computes[computes.step == k].start_ns.min()
        margins.append(first_compute - last_apply_of_previous)
    assert min(margins) > 0, margins
    barrier = ev[ev.phase == "barrier"]
    assert len(barrier) == cfg.workers * cfg.steps and (barrier.duration_ns >= 0).all()
    assert len(ev[ev.phase == "pull"]) == cfg.workers * cfg.steps


def test_ssp_staleness_stays_within_the_bound_and_workers_within_s_steps(runs):
    cfg, out = runs["ssp"]
    ev = events(out)
    stale = ev[(ev.phase == "apply")].staleness
    assert (stale >= 0).all() and stale.max() <= cfg.staleness_bound == 2 * (2 * 1 + 1)
    pushes = ev[(ev.role == "worker") & (ev.phase == "push")]
    push_end = {a: np.sort(end_ns(g).to_numpy()) for a, g in pushes.groupby("actor")}
    computes = ev[(ev.role == "worker") & (ev.phase == "compute")]
    for row in computes.itertuples():
        for other, ends in push_end.items():
            if other != row.actor:  # steps the other had completed when this step began
                done = np.searchsorted(ends, row.start_ns, side="right")
                assert row.step - done <= cfg.staleness, (row.actor, row.step, other, done)
    barrier = ev[ev.phase == "barrier"]
    assert len(barrier) == cfg.workers * (cfg.steps - 1)


def test_async_with_one_worker_has_staleness_zero(ray_local):
    cfg = make_cfg(workers=1, servers=2, workload={"steps": 6})
    ev = events(run_config(cfg, 0, "run-one"))
    stale = ev[ev.phase == "apply"].staleness
    assert len(stale) == 12 and (stale == 0).all()


def step_rate(outcome):
    ev = events(outcome)
    train_s = ev[ev.phase == "train"].duration_ns.sum() / 1e9
    return (ev.phase == "push").sum() / train_s


def test_four_shards_beat_one_when_applies_are_heavy(ray_local):
    # 40 ms of emulated service time per update of the whole model: one shard caps the job at
    # 25 updates/s whatever N; four shards serve a quarter each, concurrently.
    fields = dict(workers=4, apply_seconds="40ms", compute={"seconds": "1ms"}, workload={"steps": 10},
                  gradient_bytes="64KiB")
    one = run_config(make_cfg(servers=1, **fields), 0, "run-s1")
    four = run_config(make_cfg(servers=4, **fields), 0, "run-s4")
    assert step_rate(four) / step_rate(one) > 1.5


def test_a_failing_worker_ends_the_wait_at_once(ray_local):
    @ray_local.remote(num_cpus=0)
    def stuck():
        time.sleep(60)

    @ray_local.remote(num_cpus=0)
    def fails():
        raise ValueError("worker broke")

    refs = [stuck.remote(), fails.remote()]
    t0 = time.monotonic()
    try:
        with pytest.raises(ray_local.exceptions.RayTaskError, match="worker broke"):
            _get_fail_fast(refs)
        assert time.monotonic() - t0 < 30
    finally:
        ray_local.cancel(refs[0], force=True)
